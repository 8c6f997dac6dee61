//! The messaging store in SQL, one text for both backends: SQLite (`messaging.db`) and
//! PostgreSQL (schema `kep_messaging`). Where the dialects differ (JSON, time formatting,
//! row locks) each backend has its piece, chosen by `ON_POSTGRES`.

use std::collections::HashSet;

use crate::ids::{ClientId, ContentGroupId, FileId, MessageUid, ReportGroupId};
use sqlx::QueryBuilder;
use sqlx::migrate::Migrator;

use super::{
    ClientRow, GroupCompletion, Handed, Handover, Inserted, MessageCount, MessageDetailRow,
    MessageFilter, MessageRow, MessageSummaryRow, OutboxRow, ReceiptRow, ReportGroupRow,
    SearchFilter, SearchQuery, Store, UploadRow,
};
use crate::kinds::{Channel, Route, Status, UploadKind};
use batch::Batches;
use dialect::Dialect;

mod batch;
mod dialect;
mod operator;
mod receipts;
mod uploads;

pub static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");
pub static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

const MESSAGE_COLUMNS: &str = "uid, client_id, cid, channel, message_type, phone_number, request, request_hash, \
    status, rcs_status, fallback_status, sms_status_code, error_message, attempts, reg_date, req_date, sent_date, res_date";

/// The columns of [`MessageSummaryRow`].
const SUMMARY_COLUMNS: &str = "uid, client_id, cid, channel, message_type, phone_number, status, attempts, reg_date, res_date";

kep_core::sql_store! {
    impl Store {
        async fn insert_client(
            &self,
            client_id: &ClientId,
            name: Option<&str>,
            secret_hash: &str,
            now: i64,
        ) -> sqlx::Result<bool> {
            let done = sqlx::query(
                "INSERT INTO clients (client_id, name, secret_hash, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (client_id) DO NOTHING",
            )
            .bind(client_id)
            .bind(name)
            .bind(secret_hash)
            .bind(now)
            .execute(&self.pool)
            .await?;
            Ok(done.rows_affected() == 1)
        }

        async fn clients(&self) -> sqlx::Result<Vec<ClientRow>> {
            sqlx::query_as("SELECT client_id, name FROM clients ORDER BY created_at, client_id")
                .fetch_all(&self.pool)
                .await
        }

        async fn client_secret_hash(&self, client_id: &ClientId) -> sqlx::Result<Option<String>> {
            let row: Option<(String,)> =
                sqlx::query_as("SELECT secret_hash FROM clients WHERE client_id = $1")
                    .bind(client_id)
                    .fetch_optional(&self.pool)
                    .await?;
            Ok(row.map(|r| r.0))
        }

        async fn set_client_secret(
            &self,
            client_id: &ClientId,
            secret_hash: &str,
        ) -> sqlx::Result<bool> {
            let mut tx = self.pool.begin().await?;
            let done = sqlx::query("UPDATE clients SET secret_hash = $1 WHERE client_id = $2")
                .bind(secret_hash)
                .bind(client_id)
                .execute(&mut *tx)
                .await?;
            // A new secret ends the tokens the old one got.
            sqlx::query("DELETE FROM tokens WHERE client_id = $1")
                .bind(client_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(done.rows_affected() == 1)
        }

        async fn delete_client(&self, client_id: &ClientId) -> sqlx::Result<bool> {
            let mut tx = self.pool.begin().await?;
            // Its messages and hand-overs by hand: PostgreSQL has no foreign key there.
            let due = ON_POSTGRES
                .then_some("DELETE FROM due WHERE uid IN (SELECT uid FROM messages WHERE client_id = $1)");
            for sql in due.into_iter().chain([
                "DELETE FROM outbox WHERE uid IN (SELECT uid FROM messages WHERE client_id = $1)",
                "DELETE FROM messages WHERE client_id = $1",
            ]) {
                sqlx::query(sql).bind(client_id).execute(&mut *tx).await?;
            }
            let done = sqlx::query("DELETE FROM clients WHERE client_id = $1")
                .bind(client_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(done.rows_affected() == 1)
        }

        async fn insert_token(
            &self,
            token_hash: &str,
            client_id: &ClientId,
            expires_at: i64,
            now: i64,
        ) -> sqlx::Result<()> {
            let mut tx = self.pool.begin().await?;
            sqlx::query("DELETE FROM tokens WHERE expires_at <= $1")
                .bind(now)
                .execute(&mut *tx)
                .await?;
            sqlx::query("INSERT INTO tokens (token_hash, client_id, expires_at) VALUES ($1, $2, $3)")
                .bind(token_hash)
                .bind(client_id)
                .bind(expires_at)
                .execute(&mut *tx)
                .await?;
            tx.commit().await
        }

        async fn token_client(
            &self,
            token_hash: &str,
            now: i64,
        ) -> sqlx::Result<Option<(ClientId, i64)>> {
            sqlx::query_as(
                "SELECT client_id, expires_at FROM tokens WHERE token_hash = $1 AND expires_at > $2",
            )
            .bind(token_hash)
            .bind(now)
            .fetch_optional(&self.pool)
            .await
        }

        async fn claim_due(
            &self,
            now_ms: i64,
            lease_ms: i64,
            limit: i64,
        ) -> sqlx::Result<Vec<MessageRow>> {
            // SQLite: `status = '100'` (Accepted) is written out as the partial index
            // `messages_due` has it, so the planner uses the index. PostgreSQL: the queue is
            // its own table (migration 0003), and nodes claiming at once skip each other's rows.
            let sql = if ON_POSTGRES {
                format!(
                    "WITH c AS (UPDATE due SET next_attempt_at = $1 WHERE uid IN
                       (SELECT uid FROM due WHERE next_attempt_at <= $2
                        ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED) RETURNING uid)
                     UPDATE messages SET next_attempt_at = $1, attempts = attempts + 1
                     WHERE uid IN (SELECT uid FROM c) RETURNING {MESSAGE_COLUMNS}"
                )
            } else {
                format!(
                    "UPDATE messages SET next_attempt_at = $1, attempts = attempts + 1
                     WHERE uid IN (SELECT uid FROM messages WHERE status = '100' AND next_attempt_at <= $2
                                   ORDER BY next_attempt_at LIMIT $3)
                     RETURNING {MESSAGE_COLUMNS}"
                )
            };
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(now_ms + lease_ms)
                .bind(now_ms)
                .bind(limit)
                .fetch_all(&self.pool)
                .await
        }

        async fn retry_at(&self, uid: &MessageUid, at_ms: i64) -> sqlx::Result<()> {
            // A message is in PostgreSQL's queue table while it is Accepted.
            let query = if ON_POSTGRES {
                sqlx::query("UPDATE due SET next_attempt_at = $1 WHERE uid = $2")
                    .bind(at_ms)
                    .bind(uid)
            } else {
                sqlx::query("UPDATE messages SET next_attempt_at = $1 WHERE uid = $2 AND status = $3")
                    .bind(at_ms)
                    .bind(uid)
                    .bind(Status::Accepted)
            };
            query.execute(&self.pool).await?;
            Ok(())
        }

        async fn commit(
            &self,
            accepted: &[&MessageRow],
            finished: &[(&MessageRow, &[Handover])],
            handed: &[&Handed],
            claim_ms: i64,
        ) -> sqlx::Result<Vec<Inserted>> {
            let mut tx = self.pool.begin().await?;
            // All the accepted messages in one statement (SQLite takes up to 32,766 values: 14
            // columns × the writer's batch fits), then all the finishes in two.
            let inserted = if accepted.is_empty() {
                HashSet::new()
            } else {
                <Db as Batches>::insert_messages(&mut tx, accepted, claim_ms).await?
            };
            let mut answers = Vec::with_capacity(accepted.len());
            for row in accepted {
                answers.push(if inserted.contains(&row.uid) {
                    Inserted::New
                } else {
                    // Its cid was taken, by an earlier message or one earlier in this batch.
                    Inserted::Existing(Box::new(
                        message_by_cid(&mut tx, &row.client_id, &row.cid).await?,
                    ))
                });
            }
            // 8 values a row: the writer's batch fits one statement.
            if !finished.is_empty() {
                <Db as Batches>::finish_all(&mut tx, finished).await?;
            }
            if !handed.is_empty() {
                <Db as Batches>::hand_over_all(&mut tx, handed).await?;
            }
            tx.commit().await?;
            Ok(answers)
        }

        async fn record_receipt(
            &self,
            account: &str,
            carrier_message_id: &str,
            state: &str,
            at: i64,
        ) -> sqlx::Result<Option<Vec<ReceiptRow>>> {
            let mut tx = self.pool.begin().await?;
            if ON_POSTGRES {
                sqlx::query(receipts::LOCK_MESSAGE)
                    .bind(account)
                    .bind(carrier_message_id)
                    .execute(&mut *tx)
                    .await?;
            }
            let part: Option<(MessageUid, Route, i64)> = sqlx::query_as(receipts::RECORD)
                .bind(state)
                .bind(at)
                .bind(account)
                .bind(carrier_message_id)
                .fetch_optional(&mut *tx)
                .await?;
            let Some((uid, route, attempt)) = part else {
                let known: Option<(i64,)> = sqlx::query_as(receipts::KNOWN)
                    .bind(account)
                    .bind(carrier_message_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                return Ok(known.map(|_| Vec::new()));
            };
            let parts = sqlx::query_as(receipts::HAND_OVER)
                .bind(&uid)
                .bind(route)
                .bind(attempt)
                .fetch_all(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Some(parts))
        }

        async fn receipts_of(&self, uid: &MessageUid) -> sqlx::Result<Vec<ReceiptRow>> {
            sqlx::query_as(receipts::OF_MESSAGE)
                .bind(uid)
                .fetch_all(&self.pool)
                .await
        }

        async fn adopt_receipts(&self, carrier: &str, account: &str) -> sqlx::Result<u64> {
            let adopted = sqlx::query(receipts::ADOPT)
                .bind(account)
                .bind(carrier)
                .execute(&self.pool)
                .await?;
            Ok(adopted.rows_affected())
        }

        async fn sweep_receipts(&self, before_ms: i64) -> sqlx::Result<u64> {
            let swept = sqlx::query(receipts::SWEEP).bind(before_ms).execute(&self.pool).await?;
            Ok(swept.rows_affected())
        }

        async fn message_by_uid(&self, uid: &MessageUid) -> sqlx::Result<Option<MessageRow>> {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE uid = $1"
            )))
            .bind(uid)
            .fetch_optional(&self.pool)
            .await
        }

        async fn message(
            &self,
            client_id: &ClientId,
            channel: Channel,
            uid: &MessageUid,
        ) -> sqlx::Result<Option<MessageRow>> {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE uid = $1 AND client_id = $2 AND channel = $3"
            )))
            .bind(uid)
            .bind(client_id)
            .bind(channel)
            .fetch_optional(&self.pool)
            .await
        }

        async fn search(&self, q: &SearchQuery<'_>) -> sqlx::Result<Vec<MessageRow>> {
            let mut b: QueryBuilder<Db> = QueryBuilder::new(format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE client_id = "
            ));
            b.push_bind(q.client_id);
            push_filters(&mut b, q);
            b.push(" ORDER BY uid LIMIT ").push_bind(q.limit);
            b.build_query_as().fetch_all(&self.pool).await
        }

        async fn xms_page(
            &self,
            q: &SearchQuery<'_>,
            utc_offset_s: i64,
        ) -> sqlx::Result<(String, i64, Option<MessageUid>)> {
            // A page is up to 1000 rows; decoding them one by one through the driver cost more
            // than the query (a thread hand-off per row, on SQLite), so the database builds
            // the JSON and hands back one row.
            let size = q.limit - 1;
            let mut b: QueryBuilder<Db> = QueryBuilder::new("SELECT COALESCE(");
            let array = SQL.page_array();
            b.push(array.0).push_bind(size).push(array.1);
            b.push(", '[]'), COUNT(*), MAX(uid) FILTER (WHERE rn <= ");
            b.push_bind(size);
            b.push(") FROM (SELECT uid, ROW_NUMBER() OVER (ORDER BY uid) AS rn, ");
            let (row, date) = (SQL.xms_row(), SQL.reg_date());
            b.push(row.0).push(date.0).push_bind(utc_offset_s).push(date.1);
            b.push(row.1);
            b.push(
                " AS obj FROM (SELECT uid, cid, reg_date, status, sms_status_code, error_message, request
                   FROM messages WHERE client_id = ",
            );
            b.push_bind(q.client_id);
            push_filters(&mut b, q);
            b.push(" ORDER BY uid LIMIT ").push_bind(q.limit);
            b.push(") m");
            b.push(SQL.request_fields());
            b.push(") page");
            b.build_query_as().fetch_one(&self.pool).await
        }

        async fn hand_out_results(
            &self,
            client_id: &ClientId,
            group_id: &ReportGroupId,
            now_ms: i64,
            lease_ms: i64,
            limit: i64,
        ) -> sqlx::Result<Vec<MessageRow>> {
            let mut tx = self.pool.begin().await?;
            sqlx::query(
                "UPDATE messages SET report_group_id = NULL WHERE report_group_id IN
                   (SELECT report_group_id FROM report_groups WHERE client_id = $1 AND completed_at IS NULL AND lease_until <= $2)",
            )
            .bind(client_id)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM report_groups WHERE client_id = $1 AND completed_at IS NULL AND lease_until <= $2")
                .bind(client_id)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
            // The RCS results not yet reported, in the words of the partial index
            // `messages_unreported`, so the planner uses it.
            let skip_locked = SQL.skip_locked();
            let mut rows: Vec<MessageRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "UPDATE messages SET report_group_id = $1 WHERE uid IN
                   (SELECT uid FROM messages WHERE client_id = $2 AND channel = 'RCS' AND reported = 0 AND status <> '100'
                      AND report_group_id IS NULL ORDER BY uid LIMIT $3{skip_locked})
                 RETURNING {MESSAGE_COLUMNS}"
            )))
            .bind(group_id)
            .bind(client_id)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
            if !rows.is_empty() {
                sqlx::query("INSERT INTO report_groups (report_group_id, client_id, created_at, lease_until) VALUES ($1, $2, $3, $4)")
                    .bind(group_id)
                    .bind(client_id)
                    .bind(now_ms)
                    .bind(now_ms + lease_ms)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            rows.sort_by(|a, b| a.uid.cmp(&b.uid));
            Ok(rows)
        }

        async fn complete_group(
            &self,
            client_id: &ClientId,
            group_id: &ReportGroupId,
            now_ms: i64,
        ) -> sqlx::Result<GroupCompletion> {
            let mut tx = self.pool.begin().await?;
            let done = sqlx::query(
                "UPDATE report_groups SET completed_at = $1
                 WHERE report_group_id = $2 AND client_id = $3 AND completed_at IS NULL AND lease_until > $4",
            )
            .bind(now_ms)
            .bind(group_id)
            .bind(client_id)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 1 {
                sqlx::query("UPDATE messages SET reported = 1 WHERE report_group_id = $1")
                    .bind(group_id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                return Ok(GroupCompletion::Done);
            }
            let state: Option<(Option<i64>,)> = sqlx::query_as(
                "SELECT completed_at FROM report_groups WHERE report_group_id = $1 AND client_id = $2",
            )
            .bind(group_id)
            .bind(client_id)
            .fetch_optional(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(match state {
                None => GroupCompletion::Unknown,
                Some((Some(_),)) => GroupCompletion::AlreadyCompleted,
                Some((None,)) => GroupCompletion::Expired,
            })
        }

        async fn insert_uploads(&self, rows: &[UploadRow]) -> sqlx::Result<()> {
            let mut tx = self.pool.begin().await?;
            for r in rows {
                sqlx::query(uploads::INSERT)
                .bind(&r.file_id)
                .bind(&r.client_id)
                .bind(r.kind)
                .bind(&r.content_group_id)
                .bind(&r.description)
                .bind(r.size)
                .bind(r.created_at)
                .bind(r.expires_at)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await
        }

        async fn rcs_file_usable(
            &self,
            client_id: &ClientId,
            file_id: &FileId,
            now_ms: i64,
        ) -> sqlx::Result<bool> {
            let found: i64 = sqlx::query_scalar(uploads::RCS_FILE_USABLE)
            .bind(file_id)
            .bind(client_id)
            .bind(UploadKind::Rcs)
            .bind(now_ms)
            .fetch_one(&self.pool)
            .await?;
            Ok(found > 0)
        }

        async fn mms_group_usable(
            &self,
            client_id: &ClientId,
            group: &ContentGroupId,
            now_ms: i64,
        ) -> sqlx::Result<bool> {
            let (total, live): (i64, i64) = sqlx::query_as(uploads::MMS_GROUP)
            .bind(now_ms)
            .bind(group)
            .bind(client_id)
            .bind(UploadKind::Mms)
            .fetch_one(&self.pool)
            .await?;
            Ok(total > 0 && total == live)
        }

        async fn take_expired_uploads(&self, now_ms: i64) -> sqlx::Result<Vec<FileId>> {
            let rows: Vec<(FileId,)> = sqlx::query_as(uploads::TAKE_EXPIRED)
                .bind(now_ms)
                .fetch_all(&self.pool)
                .await?;
            Ok(rows.into_iter().map(|r| r.0).collect())
        }

        async fn queued(&self) -> sqlx::Result<i64> {
            // Read from the partial index of the messages at 100 (SQLite), the queue table
            // (PostgreSQL).
            let sql = if ON_POSTGRES {
                "SELECT COUNT(*) FROM due"
            } else {
                "SELECT COUNT(*) FROM messages WHERE status = '100'"
            };
            sqlx::query_scalar(sql)
                .fetch_one(&self.pool)
                .await
        }

        async fn message_counts(&self) -> sqlx::Result<Vec<MessageCount>> {
            sqlx::query_as(operator::COUNTS).fetch_all(&self.pool).await
        }

        fn writers(&self) -> usize {
            if ON_POSTGRES { 2 } else { 1 }
        }

        async fn operator_messages(&self, f: &MessageFilter) -> sqlx::Result<Vec<MessageSummaryRow>> {
            let mut b = QueryBuilder::new("");
            push_operator_messages(&mut b, f);
            b.build_query_as().fetch_all(&self.pool).await
        }

        async fn message_timeline(
            &self,
            uid: &MessageUid,
        ) -> sqlx::Result<Option<(MessageDetailRow, Vec<Handover>)>> {
            // One read transaction: one snapshot of the message and its hand-overs.
            let mut tx = self.pool.begin().await?;
            if ON_POSTGRES {
                // Its default gives each statement a snapshot of its own.
                sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .execute(&mut *tx)
                    .await?;
            }
            let message: Option<MessageDetailRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {SUMMARY_COLUMNS}, request, rcs_status, fallback_status, sms_status_code, error_message,
                   report_group_id FROM messages WHERE uid = $1"
            )))
            .bind(uid)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(message) = message else {
                return Ok(None);
            };
            let handovers = sqlx::query_as(operator::HANDOVERS)
                .bind(uid)
                .fetch_all(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Some((message, handovers)))
        }

        async fn report_groups(
            &self,
            client_id: Option<&ClientId>,
            limit: i64,
        ) -> sqlx::Result<Vec<ReportGroupRow>> {
            let mut b = QueryBuilder::new("");
            push_report_groups(&mut b, client_id, limit);
            b.build_query_as().fetch_all(&self.pool).await
        }

        async fn outbox(&self, limit: i64) -> sqlx::Result<Vec<OutboxRow>> {
            sqlx::query_as(operator::OUTBOX)
                .bind(limit)
                .fetch_all(&self.pool)
                .await
        }
    }

    /// The message a client's cid names.
    async fn message_by_cid(
        tx: &mut <Db as sqlx::Database>::Connection,
        client_id: &ClientId,
        cid: &str,
    ) -> sqlx::Result<MessageRow> {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE client_id = $1 AND cid = $2"
        )))
        .bind(client_id)
        .bind(cid)
        .fetch_one(&mut *tx)
        .await
    }

    /// Where this backend's SQL differs from the other's.
    const SQL: Dialect = Dialect {
        postgres: ON_POSTGRES,
    };

    /// The rest of a search's `WHERE`, after `client_id = $1`: its channel, uid bounds and
    /// filters.
    fn push_filters(b: &mut QueryBuilder<Db>, q: &SearchQuery<'_>) {
        b.push(" AND channel = ").push_bind(q.channel);
        b.push(" AND uid > ").push_bind(&q.after);
        b.push(" AND uid < ").push_bind(&q.before);
        for filter in &q.filters {
            match filter {
                SearchFilter::Status(s) => b.push(" AND status = ").push_bind(*s),
                SearchFilter::RcsStatus(s) => b.push(" AND rcs_status = ").push_bind(*s),
                SearchFilter::MessageType(t) => b.push(" AND message_type = ").push_bind(*t),
                SearchFilter::Etc1(v) => b
                    .push(format!(" AND {} = ", SQL.request_text("etc1")))
                    .push_bind(v),
                SearchFilter::Etc2(v) => b
                    .push(format!(" AND {} = ", SQL.request_text("etc2")))
                    .push_bind(v),
            };
        }
    }

    /// The operator's message list: only the filters given, so that the planner picks the index
    /// that serves them in uid order (`messages_by_phone`, the primary key) and never sorts. A
    /// client's messages of both channels are one walk of `messages_client_uid` per channel,
    /// merged in uid order: no index of their own to keep up at every send.
    pub(super) fn push_operator_messages(b: &mut QueryBuilder<Db>, f: &MessageFilter) {
        match (&f.client_id, f.channel) {
            (Some(_), None) => {
                push_message_select(b, f, Some(Channel::Xms));
                b.push(" UNION ALL ");
                push_message_select(b, f, Some(Channel::Rcs));
            }
            (_, channel) => push_message_select(b, f, channel),
        }
        b.push(" ORDER BY uid DESC LIMIT ").push_bind(f.limit);
    }

    /// One `SELECT` of the list: `f`'s filters, with `channel` for its channel.
    fn push_message_select(b: &mut QueryBuilder<Db>, f: &MessageFilter, channel: Option<Channel>) {
        b.push(format!("SELECT {SUMMARY_COLUMNS} FROM messages"));
        let mut word = " WHERE ";
        let mut term = |b: &mut QueryBuilder<Db>, sql: &str| {
            b.push(word).push(sql);
            word = " AND ";
        };
        if let Some(c) = &f.client_id {
            term(b, "client_id = ");
            b.push_bind(c.clone());
        }
        if let Some(p) = &f.phone_number {
            term(b, "phone_number = ");
            b.push_bind(p.clone());
        }
        if let Some(s) = f.status {
            term(b, "status = ");
            b.push_bind(s);
        }
        if let Some(c) = channel {
            term(b, "channel = ");
            b.push_bind(c);
        }
        if let Some(u) = &f.before {
            term(b, "uid < ");
            b.push_bind(u.clone());
        }
    }

    /// The newest result groups with their results counted; the insertion order (SQLite's
    /// rowid, PostgreSQL's `seq`) breaks ties within a millisecond and is the last column of
    /// the creation indexes.
    pub(super) fn push_report_groups(b: &mut QueryBuilder<Db>, client_id: Option<&ClientId>, limit: i64) {
        b.push(
            "SELECT g.report_group_id, g.client_id, g.created_at, g.lease_until, g.completed_at,
               (SELECT COUNT(*) FROM messages m WHERE m.report_group_id = g.report_group_id) AS results
             FROM report_groups g",
        );
        if let Some(c) = client_id {
            b.push(" WHERE g.client_id = ").push_bind(c);
        }
        b.push(if ON_POSTGRES {
            " ORDER BY g.created_at DESC, g.seq DESC LIMIT "
        } else {
            " ORDER BY g.created_at DESC, g.rowid DESC LIMIT "
        })
            .push_bind(limit);
    }
}

#[cfg(test)]
mod tests;
