//! The messaging service's storage seam: what it keeps (clients, tokens, messages — the
//! durable queue —, result groups, uploads and the outbox of what the carrier was handed)
//! behind one [`Store`] interface, on SQLite or PostgreSQL ([`sql`]) without the domain
//! code knowing which. [`open`] is the one place that picks the backend.

use std::sync::Arc;

use kep_core::service::Context;

use crate::ids::{ClientId, ContentGroupId, FileId, MessageUid, ReportGroupId};
use crate::kinds::{
    CarrierCode, Channel, FallbackStatus, MessageType, RcsStatus, Route, Status, UploadKind,
};

mod sql;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MessageRow {
    pub uid: MessageUid,
    pub client_id: ClientId,
    pub cid: String,
    pub channel: Channel,
    pub message_type: MessageType,
    pub phone_number: String,
    /// The accepted body, as stored: its bytes are what `request_hash` hashes, so it stays
    /// text rather than parsed JSON.
    pub request: String,
    pub request_hash: String,
    pub status: Status,
    pub rcs_status: Option<RcsStatus>,
    pub fallback_status: Option<FallbackStatus>,
    pub sms_status_code: Option<CarrierCode>,
    pub error_message: Option<String>,
    pub attempts: i64,
    pub reg_date: i64,
    pub req_date: Option<i64>,
    pub sent_date: Option<i64>,
    pub res_date: Option<i64>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxRow {
    pub id: i64,
    pub uid: MessageUid,
    pub route: Route,
    pub phone_number: String,
    /// The message's request as it was handed over: a copy of its bytes.
    pub payload: String,
    pub outcome: CarrierCode,
    pub at: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UploadRow {
    pub file_id: FileId,
    pub client_id: ClientId,
    pub kind: UploadKind,
    pub content_group_id: Option<ContentGroupId>,
    pub description: Option<String>,
    pub size: i64,
    pub created_at: i64,
    pub expires_at: i64,
}

/// One hand-over to the carrier, recorded in the outbox with the message's outcome.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Handover {
    pub route: Route,
    pub outcome: CarrierCode,
    pub at: i64,
    /// The carrier it was handed to (its `name` in `[[messaging.carriers]]`, or `simulator`).
    pub carrier: String,
}

/// A hand-over the carrier acknowledged, whose parts' delivery receipts are awaited until
/// `deadline` (the message waits in the queue until then).
#[derive(Debug, Clone)]
pub struct Handed {
    pub uid: MessageUid,
    pub route: Route,
    /// The message's attempt (`attempts`) it was: a receipt of an earlier one is no answer.
    pub attempt: i64,
    pub carrier: String,
    /// The account whose receipts answer the parts ([`crate::pipeline::receipts::Parts`]).
    pub account: String,
    /// The id the carrier gave each submitted part.
    pub carrier_message_ids: Vec<String>,
    pub at: i64,
    pub deadline: i64,
    /// The message's RCS status so far (an RCS that failed before a fallback was handed).
    pub rcs_status: Option<RcsStatus>,
}

/// One submitted part of a hand-over and its receipt, if one came.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReceiptRow {
    pub uid: MessageUid,
    pub route: Route,
    pub attempt: i64,
    pub carrier: String,
    pub submitted_at: i64,
    /// The receipt's state word (`DELIVRD`, `UNDELIV`, …).
    pub state: Option<String>,
}

/// How many stored messages came by one channel and stand at one status.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MessageCount {
    pub channel: Channel,
    pub status: Status,
    pub messages: i64,
}

/// A message as the operator's list shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MessageSummaryRow {
    pub uid: MessageUid,
    pub client_id: ClientId,
    pub cid: String,
    pub channel: Channel,
    pub message_type: MessageType,
    pub phone_number: String,
    pub status: Status,
    pub attempts: i64,
    pub reg_date: i64,
    pub res_date: Option<i64>,
}

/// A message as the operator's timeline shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MessageDetailRow {
    #[sqlx(flatten)]
    pub summary: MessageSummaryRow,
    pub request: String,
    pub rcs_status: Option<RcsStatus>,
    pub fallback_status: Option<FallbackStatus>,
    pub sms_status_code: Option<CarrierCode>,
    pub error_message: Option<String>,
    pub report_group_id: Option<ReportGroupId>,
}

/// The operator's message list: every filter given applies.
pub struct MessageFilter {
    pub client_id: Option<ClientId>,
    pub phone_number: Option<String>,
    pub status: Option<Status>,
    pub channel: Option<Channel>,
    /// Only uids below this one.
    pub before: Option<MessageUid>,
    pub limit: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReportGroupRow {
    pub report_group_id: ReportGroupId,
    pub client_id: ClientId,
    pub created_at: i64,
    pub lease_until: i64,
    pub completed_at: Option<i64>,
    /// The messages it holds.
    pub results: i64,
}

/// What a search asks for; all within one client's messages.
pub struct SearchQuery<'a> {
    pub client_id: &'a ClientId,
    pub channel: Channel,
    /// uid bounds: `(after, before)`, exclusive.
    pub after: MessageUid,
    pub before: MessageUid,
    pub limit: i64,
    pub filters: Vec<SearchFilter>,
}

/// A field a search may ask to equal a value.
pub enum SearchFilter {
    Status(Status),
    RcsStatus(RcsStatus),
    MessageType(MessageType),
    /// The request's `etc1`.
    Etc1(String),
    /// The request's `etc2`.
    Etc2(String),
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClientRow {
    pub client_id: ClientId,
    pub name: Option<String>,
}

pub enum GroupCompletion {
    Done,
    Unknown,
    AlreadyCompleted,
    /// Its lease ran out: its results went back to the pool.
    Expired,
}

pub enum Inserted {
    New,
    /// The client already has a message with that cid.
    Existing(Box<MessageRow>),
}

#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// False when a client of that id exists (nothing is changed).
    async fn insert_client(
        &self,
        client_id: &ClientId,
        name: Option<&str>,
        secret_hash: &str,
        now: i64,
    ) -> sqlx::Result<bool>;
    async fn clients(&self) -> sqlx::Result<Vec<ClientRow>>;
    async fn client_secret_hash(&self, client_id: &ClientId) -> sqlx::Result<Option<String>>;
    /// A new secret ends the tokens the old one got; `Ok(false)` for an unknown client.
    async fn set_client_secret(
        &self,
        client_id: &ClientId,
        secret_hash: &str,
    ) -> sqlx::Result<bool>;
    /// The client, its tokens and its messages; `Ok(false)` for an unknown client.
    async fn delete_client(&self, client_id: &ClientId) -> sqlx::Result<bool>;

    /// Stores a new token and drops the expired ones, at once.
    async fn insert_token(
        &self,
        token_hash: &str,
        client_id: &ClientId,
        expires_at: i64,
        now: i64,
    ) -> sqlx::Result<()>;
    /// The client of an unexpired token, and when it expires.
    async fn token_client(
        &self,
        token_hash: &str,
        now: i64,
    ) -> sqlx::Result<Option<(ClientId, i64)>>;

    /// Claims up to `limit` due messages for `lease_ms`, so a crash hands them back.
    async fn claim_due(
        &self,
        now_ms: i64,
        lease_ms: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<MessageRow>>;
    /// A transient failure: try again at `at_ms`.
    async fn retry_at(&self, uid: &MessageUid, at_ms: i64) -> sqlx::Result<()>;
    /// One group commit, in one transaction: stores the accepted messages — one answer
    /// each, in order; a message whose cid its client already used (earlier, or earlier in
    /// the batch) is answered with the message that has it — and records the final states
    /// of the finished ones with their hand-overs. An accepted message goes in already
    /// claimed, for `claim_ms` after its `reg_date`, by the node that accepted it.
    /// Also records the hand-overs awaiting receipts (`handed`): their parts, and each
    /// message kept in the queue until its deadline.
    async fn commit(
        &self,
        accepted: &[&MessageRow],
        finished: &[(&MessageRow, &[Handover])],
        handed: &[&Handed],
        claim_ms: i64,
    ) -> sqlx::Result<Vec<Inserted>>;

    /// Records a receipt for the part the carrier gave `carrier_message_id` within
    /// `account`: every part of its hand-over, as far as their receipts came; none when the
    /// part already had its receipt; `None` for a part kep never handed over.
    async fn record_receipt(
        &self,
        account: &str,
        carrier_message_id: &str,
        state: &str,
        at: i64,
    ) -> sqlx::Result<Option<Vec<ReceiptRow>>>;
    /// Every part a message was handed over in, with its receipt if one came.
    async fn receipts_of(&self, uid: &MessageUid) -> sqlx::Result<Vec<ReceiptRow>>;
    /// Moves the parts handed to `carrier` before receipts were matched by account
    /// (migration 0006: their account is the carrier's name) to `account`; how many.
    async fn adopt_receipts(&self, carrier: &str, account: &str) -> sqlx::Result<u64>;
    /// Forgets the parts submitted before `before_ms`; how many.
    async fn sweep_receipts(&self, before_ms: i64) -> sqlx::Result<u64>;
    /// Any client's message.
    async fn message_by_uid(&self, uid: &MessageUid) -> sqlx::Result<Option<MessageRow>>;

    async fn message(
        &self,
        client_id: &ClientId,
        channel: Channel,
        uid: &MessageUid,
    ) -> sqlx::Result<Option<MessageRow>>;
    /// One page of a client's messages in uid order.
    async fn search(&self, q: &SearchQuery<'_>) -> sqlx::Result<Vec<MessageRow>>;
    /// One page of a client's XMS search as the JSON array of its rows: (the array, rows
    /// found — `limit + 1` means more follow —, the last uid on the page). Times are
    /// formatted with `utc_offset_s`, the service zone's offset at the page's start in
    /// seconds east of UTC.
    async fn xms_page(
        &self,
        q: &SearchQuery<'_>,
        utc_offset_s: i64,
    ) -> sqlx::Result<(String, i64, Option<MessageUid>)>;

    /// Hands out up to `limit` finished RCS results that no open group holds, as the new
    /// group `group_id`; groups whose lease ran out first give theirs back.
    async fn hand_out_results(
        &self,
        client_id: &ClientId,
        group_id: &ReportGroupId,
        now_ms: i64,
        lease_ms: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<MessageRow>>;
    /// Retires a group's results for good.
    async fn complete_group(
        &self,
        client_id: &ClientId,
        group_id: &ReportGroupId,
        now_ms: i64,
    ) -> sqlx::Result<GroupCompletion>;

    async fn insert_uploads(&self, rows: &[UploadRow]) -> sqlx::Result<()>;
    /// Whether the client has an unexpired RCS file `file_id`.
    async fn rcs_file_usable(
        &self,
        client_id: &ClientId,
        file_id: &FileId,
        now_ms: i64,
    ) -> sqlx::Result<bool>;
    /// Whether the client has an MMS content group whose files are all unexpired.
    async fn mms_group_usable(
        &self,
        client_id: &ClientId,
        group: &ContentGroupId,
        now_ms: i64,
    ) -> sqlx::Result<bool>;
    /// Deletes expired uploads; their file ids.
    async fn take_expired_uploads(&self, now_ms: i64) -> sqlx::Result<Vec<FileId>>;

    /// The operator's list: messages of every client, newest first, as `f` filters them.
    async fn operator_messages(&self, f: &MessageFilter) -> sqlx::Result<Vec<MessageSummaryRow>>;
    /// Any client's message and its hand-overs in the order they happened, read together
    /// (a delivery records both at once).
    async fn message_timeline(
        &self,
        uid: &MessageUid,
    ) -> sqlx::Result<Option<(MessageDetailRow, Vec<Handover>)>>;
    /// The newest `limit` result groups, of one client or all, newest first.
    async fn report_groups(
        &self,
        client_id: Option<&ClientId>,
        limit: i64,
    ) -> sqlx::Result<Vec<ReportGroupRow>>;

    /// The newest `limit` outbox rows, newest first.
    async fn outbox(&self, limit: i64) -> sqlx::Result<Vec<OutboxRow>>;
    /// How many messages are accepted and not yet at a final status.
    async fn queued(&self) -> sqlx::Result<i64>;
    /// How many messages the store holds, by channel and status (a scan of every message:
    /// read once, at start).
    async fn message_counts(&self) -> sqlx::Result<Vec<MessageCount>>;
    /// How many group commits may run at once: one on SQLite (one writer at a time), two
    /// on PostgreSQL (one commit's flush overlaps the next batch; more split the batches
    /// too thin, BENCHMARKS.md).
    fn writers(&self) -> usize;
}

/// Opens the service's store on the backend of the settings (`messaging.db` under the
/// data dir, or schema `kep_messaging` of `database_url`), migrated.
pub async fn open(ctx: &Context) -> anyhow::Result<Arc<dyn Store>> {
    use kep_core::storage::Database;
    Ok(
        match ctx
            .database_on("messaging", &sql::SQLITE, &sql::POSTGRES)
            .await?
        {
            Database::Sqlite(pool) => Arc::new(sql::SqliteStore::new(pool)),
            Database::Postgres(pool) => Arc::new(sql::PgStore::new(pool)),
        },
    )
}
