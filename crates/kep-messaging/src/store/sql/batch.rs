//! The group commit's batch statements, which differ by backend. SQLite takes a batch as
//! one multi-row `VALUES`. PostgreSQL takes it as one array per column (`unnest`): the
//! statement's text is the same whatever the batch's size, so each connection prepares and
//! plans it once, where a `VALUES` of each size was planned anew (a tenth of PostgreSQL's
//! time under load, BENCHMARKS.md).

use std::collections::HashSet;
use std::future::Future;

use sqlx::QueryBuilder;

use crate::ids::MessageUid;
use crate::store::{Handed, Handover, MessageRow};

/// A batch of finished messages, each with what was handed to the carrier.
pub type Finished<'a> = [(&'a MessageRow, &'a [Handover])];

pub trait Batches: sqlx::Database {
    /// Inserts the accepted messages, each claimed for `claim_ms` by this node; the uids
    /// inserted (a cid already taken inserts nothing).
    fn insert_messages(
        tx: &mut Self::Connection,
        rows: &[&MessageRow],
        claim_ms: i64,
    ) -> impl Future<Output = sqlx::Result<HashSet<MessageUid>>> + Send;

    /// The final states of the messages, and their hand-overs.
    fn finish_all(
        tx: &mut Self::Connection,
        done: &Finished<'_>,
    ) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// The parts of the acknowledged hand-overs, and each message kept in the queue until
    /// its receipts' deadline.
    fn hand_over_all(
        tx: &mut Self::Connection,
        handed: &[&Handed],
    ) -> impl Future<Output = sqlx::Result<()>> + Send;
}

/// Every submitted part of the hand-overs: (hand-over, carrier message id).
fn parts<'a>(handed: &'a [&'a Handed]) -> Vec<(&'a Handed, &'a str)> {
    handed
        .iter()
        .flat_map(|h| {
            h.carrier_message_ids
                .iter()
                .map(move |id| (*h, id.as_str()))
        })
        .collect()
}

fn handovers<'a>(done: &'a Finished<'a>) -> Vec<(&'a MessageRow, &'a Handover)> {
    done.iter()
        .flat_map(|(m, hs)| hs.iter().map(move |h| (*m, h)))
        .collect()
}

impl Batches for sqlx::Sqlite {
    async fn insert_messages(
        tx: &mut sqlx::SqliteConnection,
        rows: &[&MessageRow],
        claim_ms: i64,
    ) -> sqlx::Result<HashSet<MessageUid>> {
        // 14 values a row: SQLite takes up to 32,766 per statement, the writer's batch fits.
        let mut b: QueryBuilder<sqlx::Sqlite> = QueryBuilder::new(
            "INSERT INTO messages (uid, client_id, cid, channel, message_type, phone_number, request, request_hash,
               status, rcs_status, attempts, next_attempt_at, reg_date, req_date) ",
        );
        b.push_values(rows, |mut v, m| {
            v.push_bind(&m.uid)
                .push_bind(&m.client_id)
                .push_bind(&m.cid)
                .push_bind(m.channel)
                .push_bind(m.message_type)
                .push_bind(&m.phone_number)
                .push_bind(&m.request)
                .push_bind(&m.request_hash)
                .push_bind(m.status)
                .push_bind(m.rcs_status)
                .push_bind(m.attempts)
                .push_bind(m.reg_date.saturating_add(claim_ms))
                .push_bind(m.reg_date)
                .push_bind(m.req_date);
        });
        b.push(" ON CONFLICT (client_id, cid) DO NOTHING RETURNING uid");
        let inserted: Vec<(MessageUid,)> = b.build_query_as().fetch_all(&mut *tx).await?;
        Ok(inserted.into_iter().map(|r| r.0).collect())
    }

    async fn finish_all(tx: &mut sqlx::SqliteConnection, done: &Finished<'_>) -> sqlx::Result<()> {
        let mut b: QueryBuilder<sqlx::Sqlite> = QueryBuilder::new(
            "WITH v(uid, status, rcs_status, fallback_status, sms_status_code, error_message, sent_date, res_date) AS (",
        );
        b.push_values(done, |mut v, (m, _)| {
            v.push_bind(&m.uid)
                .push_bind(m.status)
                .push_bind(m.rcs_status)
                .push_bind(m.fallback_status)
                .push_bind(m.sms_status_code)
                .push_bind(&m.error_message)
                .push_bind(m.sent_date)
                .push_bind(m.res_date);
        });
        b.push(
            ") UPDATE messages SET status = v.status, rcs_status = v.rcs_status, fallback_status = v.fallback_status,
               sms_status_code = v.sms_status_code, error_message = v.error_message, sent_date = v.sent_date,
               res_date = v.res_date FROM v WHERE messages.uid = v.uid",
        );
        b.build().execute(&mut *tx).await?;
        // 7 values a row: well under SQLite's 32,766 per statement.
        for chunk in handovers(done).chunks(4096) {
            let mut b: QueryBuilder<sqlx::Sqlite> = QueryBuilder::new(
                "INSERT INTO outbox (uid, route, phone_number, payload, outcome, at, carrier) ",
            );
            b.push_values(chunk, |mut v, (m, h)| {
                v.push_bind(&m.uid)
                    .push_bind(h.route)
                    .push_bind(&m.phone_number)
                    .push_bind(&m.request)
                    .push_bind(h.outcome)
                    .push_bind(h.at)
                    .push_bind(&h.carrier);
            });
            b.build().execute(&mut *tx).await?;
        }
        Ok(())
    }

    async fn hand_over_all(
        tx: &mut sqlx::SqliteConnection,
        handed: &[&Handed],
    ) -> sqlx::Result<()> {
        // 7 values a row: well under SQLite's 32,766 per statement. A part already known
        // (the same id twice from a carrier) keeps its first hand-over.
        for chunk in parts(handed).chunks(4096) {
            let mut b: QueryBuilder<sqlx::Sqlite> = QueryBuilder::new(
                "INSERT OR IGNORE INTO carrier_receipts (account, carrier_message_id, carrier, uid, route, attempt, submitted_at) ",
            );
            b.push_values(chunk, |mut v, (h, id)| {
                v.push_bind(&h.account)
                    .push_bind(*id)
                    .push_bind(&h.carrier)
                    .push_bind(&h.uid)
                    .push_bind(h.route)
                    .push_bind(h.attempt)
                    .push_bind(h.at);
            });
            b.build().execute(&mut *tx).await?;
        }
        // A message still Accepted waits in the queue for its receipts (one a receipt
        // already finished is left alone).
        let mut b: QueryBuilder<sqlx::Sqlite> =
            QueryBuilder::new("WITH v(uid, deadline, sent_date, rcs_status) AS (");
        b.push_values(handed, |mut v, h| {
            v.push_bind(&h.uid)
                .push_bind(h.deadline)
                .push_bind(h.at)
                .push_bind(h.rcs_status);
        });
        b.push(
            ") UPDATE messages SET next_attempt_at = v.deadline, sent_date = COALESCE(messages.sent_date, v.sent_date),
               rcs_status = COALESCE(v.rcs_status, messages.rcs_status)
             FROM v WHERE messages.uid = v.uid AND messages.status = '100'",
        );
        b.build().execute(&mut *tx).await?;
        Ok(())
    }
}

/// One column of a batch, as the array PostgreSQL unnests.
fn column<'a, T, U>(rows: &'a [T], f: impl Fn(&'a T) -> U) -> Vec<U> {
    rows.iter().map(f).collect()
}

impl Batches for sqlx::Postgres {
    async fn insert_messages(
        tx: &mut sqlx::PgConnection,
        rows: &[&MessageRow],
        claim_ms: i64,
    ) -> sqlx::Result<HashSet<MessageUid>> {
        // What is Accepted goes into the queue table (migration 0003) in the same statement.
        let inserted: Vec<MessageUid> = sqlx::query_scalar(
            "WITH ins AS (
               INSERT INTO messages (uid, client_id, cid, channel, message_type, phone_number, request, request_hash,
                 status, rcs_status, attempts, next_attempt_at, reg_date, req_date)
               SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                 $7::text[], $8::text[], $9::text[], $10::text[], $11::int8[], $12::int8[], $13::int8[], $14::int8[])
               ON CONFLICT (client_id, cid) DO NOTHING RETURNING uid, status, next_attempt_at),
             queued AS (INSERT INTO due (uid, next_attempt_at)
               SELECT uid, next_attempt_at FROM ins WHERE status = '100')
             SELECT uid FROM ins",
        )
        .bind(column(rows, |m| m.uid.as_str()))
        .bind(column(rows, |m| m.client_id.as_str()))
        .bind(column(rows, |m| m.cid.as_str()))
        .bind(column(rows, |m| m.channel.as_str()))
        .bind(column(rows, |m| m.message_type.as_str()))
        .bind(column(rows, |m| m.phone_number.as_str()))
        .bind(column(rows, |m| m.request.as_str()))
        .bind(column(rows, |m| m.request_hash.as_str()))
        .bind(column(rows, |m| m.status.as_str()))
        .bind(column(rows, |m| m.rcs_status.map(|s| s.as_str())))
        .bind(column(rows, |m| m.attempts))
        .bind(column(rows, |m| m.reg_date.saturating_add(claim_ms)))
        .bind(column(rows, |m| m.reg_date))
        .bind(column(rows, |m| m.req_date))
        .fetch_all(&mut *tx)
        .await?;
        Ok(inserted.into_iter().collect())
    }

    async fn finish_all(tx: &mut sqlx::PgConnection, done: &Finished<'_>) -> sqlx::Result<()> {
        // Out of the queue table first: every statement that touches both locks `due`
        // before `messages` (claims, a client's deletion), so none waits on another in a
        // circle. The update changes no indexed column, so it is made in place (HOT).
        let uids = column(done, |(m, _)| m.uid.as_str());
        sqlx::query("DELETE FROM due WHERE uid = ANY($1::text[])")
            .bind(&uids)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            r#"UPDATE messages SET status = v.status, rcs_status = v.rcs_status,
                 fallback_status = v.fallback_status, sms_status_code = v.sms_status_code,
                 error_message = v.error_message, sent_date = v.sent_date, res_date = v.res_date
               FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                 $7::int8[], $8::int8[])
                 AS v(uid, status, rcs_status, fallback_status, sms_status_code, error_message, sent_date, res_date)
               WHERE messages.uid = v.uid COLLATE "C""#,
        )
        .bind(uids)
        .bind(column(done, |(m, _)| m.status.as_str()))
        .bind(column(done, |(m, _)| m.rcs_status.map(|s| s.as_str())))
        .bind(column(done, |(m, _)| m.fallback_status.map(|s| s.as_str())))
        .bind(column(done, |(m, _)| m.sms_status_code.map(|s| s.as_str())))
        .bind(column(done, |(m, _)| m.error_message.as_deref()))
        .bind(column(done, |(m, _)| m.sent_date))
        .bind(column(done, |(m, _)| m.res_date))
        .execute(&mut *tx)
        .await?;
        // The payload is the message's request: no copy (migration 0004).
        let all = handovers(done);
        sqlx::query(
            "INSERT INTO outbox (uid, route, phone_number, outcome, at, carrier)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::text[])",
        )
        .bind(column(&all, |(m, _)| m.uid.as_str()))
        .bind(column(&all, |(_, h)| h.route.as_str()))
        .bind(column(&all, |(m, _)| m.phone_number.as_str()))
        .bind(column(&all, |(_, h)| h.outcome.as_str()))
        .bind(column(&all, |(_, h)| h.at))
        .bind(column(&all, |(_, h)| h.carrier.as_str()))
        .execute(&mut *tx)
        .await?;
        Ok(())
    }

    async fn hand_over_all(tx: &mut sqlx::PgConnection, handed: &[&Handed]) -> sqlx::Result<()> {
        let all = parts(handed);
        sqlx::query(
            "INSERT INTO carrier_receipts (account, carrier_message_id, carrier, uid, route, attempt, submitted_at)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::int8[])
             ON CONFLICT DO NOTHING",
        )
        .bind(column(&all, |(h, _)| h.account.as_str()))
        .bind(column(&all, |(_, id)| *id))
        .bind(column(&all, |(h, _)| h.carrier.as_str()))
        .bind(column(&all, |(h, _)| h.uid.as_str()))
        .bind(column(&all, |(h, _)| h.route.as_str()))
        .bind(column(&all, |(h, _)| h.attempt))
        .bind(column(&all, |(h, _)| h.at))
        .execute(&mut *tx)
        .await?;
        // `due` before `messages`, as everywhere (finish_all).
        let uids = column(handed, |h| h.uid.as_str());
        sqlx::query(
            r#"UPDATE due SET next_attempt_at = v.deadline
               FROM unnest($1::text[], $2::int8[]) AS v(uid, deadline) WHERE due.uid = v.uid COLLATE "C""#,
        )
        .bind(&uids)
        .bind(column(handed, |h| h.deadline))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            r#"UPDATE messages SET sent_date = COALESCE(messages.sent_date, v.sent_date),
                 rcs_status = COALESCE(v.rcs_status, messages.rcs_status)
               FROM unnest($1::text[], $2::int8[], $3::text[]) AS v(uid, sent_date, rcs_status)
               WHERE messages.uid = v.uid COLLATE "C" AND messages.status = '100'"#,
        )
        .bind(&uids)
        .bind(column(handed, |h| h.at))
        .bind(column(handed, |h| h.rcs_status.map(|s| s.as_str())))
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}
