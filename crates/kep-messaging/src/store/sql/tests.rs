//! The operators' views read an index in order and never sort: the query plans of the
//! real query builders. Migrations keep the rows already there.

use sqlx::sqlite::SqlitePoolOptions;
use sqlx::{Sqlite, SqlitePool};

use super::operator::HANDOVERS;
use super::sqlite::{push_operator_messages, push_report_groups};
use super::*;
use crate::kinds::Status;

/// The steps of `b`'s query plan (`b` starts with `EXPLAIN QUERY PLAN`).
async fn plan(pool: &SqlitePool, mut b: QueryBuilder<Sqlite>) -> String {
    let steps: Vec<(i64, i64, i64, String)> = b.build_query_as().fetch_all(pool).await.unwrap();
    steps
        .into_iter()
        .map(|s| s.3)
        .collect::<Vec<_>>()
        .join("; ")
}

#[tokio::test]
async fn the_operators_views_read_an_index_in_order_and_never_sort() {
    // One connection: each would have its own in-memory database.
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .unwrap();
    SQLITE.run(&pool).await.unwrap();
    let client = || Some(ClientId::from("c"));
    let before = || Some(MessageUid::from("17000000000000000000"));
    let none = || MessageFilter {
        client_id: None,
        phone_number: None,
        status: None,
        channel: None,
        before: None,
        limit: 50,
    };
    let cases = [
        (
            none(),
            "SCAN messages USING INDEX sqlite_autoindex_messages_1",
        ),
        (
            MessageFilter {
                before: before(),
                ..none()
            },
            "SEARCH messages USING INDEX sqlite_autoindex_messages_1 (uid<?)",
        ),
        (
            MessageFilter {
                client_id: client(),
                ..none()
            },
            "SEARCH messages USING INDEX messages_client_uid (client_id=? AND channel=?)",
        ),
        (
            MessageFilter {
                client_id: client(),
                before: before(),
                ..none()
            },
            "SEARCH messages USING INDEX messages_client_uid (client_id=? AND channel=? AND uid<?)",
        ),
        (
            MessageFilter {
                client_id: client(),
                channel: Some(Channel::Rcs),
                ..none()
            },
            "SEARCH messages USING INDEX messages_client_uid (client_id=? AND channel=?)",
        ),
        (
            MessageFilter {
                phone_number: Some("821012345678".into()),
                ..none()
            },
            "SEARCH messages USING INDEX messages_by_phone (phone_number=?)",
        ),
        (
            MessageFilter {
                client_id: client(),
                status: Some(Status::Failed),
                ..none()
            },
            "SEARCH messages USING INDEX messages_client_uid (client_id=? AND channel=?)",
        ),
        (
            MessageFilter {
                client_id: client(),
                phone_number: Some("821012345678".into()),
                ..none()
            },
            "SEARCH messages USING INDEX messages_",
        ),
        // Few values each: a walk down the uid order that stops at the limit.
        (
            MessageFilter {
                status: Some(Status::Failed),
                ..none()
            },
            "SCAN messages USING INDEX sqlite_autoindex_messages_1",
        ),
        (
            MessageFilter {
                channel: Some(Channel::Xms),
                ..none()
            },
            "SCAN messages USING INDEX sqlite_autoindex_messages_1",
        ),
    ];
    for (f, expected) in &cases {
        let mut b = QueryBuilder::new("EXPLAIN QUERY PLAN ");
        push_operator_messages(&mut b, f);
        let plan = plan(&pool, b).await;
        assert!(plan.contains(expected), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }

    for (client_id, expected) in [
        (None, "SCAN g USING INDEX report_groups_by_created"),
        (
            client(),
            "SEARCH g USING INDEX report_groups_by_client (client_id=?)",
        ),
    ] {
        let mut b = QueryBuilder::new("EXPLAIN QUERY PLAN ");
        push_report_groups(&mut b, client_id.as_ref(), 50);
        let plan = plan(&pool, b).await;
        assert!(plan.contains(expected), "{plan}");
        assert!(
            plan.contains("USING COVERING INDEX messages_by_report_group (report_group_id=?)"),
            "{plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }

    let (_, _, _, plan): (i64, i64, i64, String) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "EXPLAIN QUERY PLAN {HANDOVERS}"
    )))
    .bind("uid")
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(plan, "SEARCH outbox USING INDEX outbox_by_uid (uid=?)");
}

#[tokio::test]
async fn a_part_handed_over_before_receipts_went_by_account_is_found_under_its_account() {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .unwrap();
    SQLITE.run_to(5, &pool).await.unwrap();
    sqlx::query(
        "INSERT INTO carrier_receipts (carrier, carrier_message_id, uid, route, attempt, submitted_at)
         VALUES ('ksc', '42', 'u1', 'SMS', 1, 1000)",
    )
    .execute(&pool)
    .await
    .unwrap();
    SQLITE.run(&pool).await.unwrap();
    let account = "smpp://kep@127.0.0.1:2775";
    let adopt = sqlx::query(receipts::ADOPT).bind(account).bind("ksc");
    assert_eq!(adopt.execute(&pool).await.unwrap().rows_affected(), 1);
    let part: (String, String, i64) = sqlx::query_as(receipts::RECORD)
        .bind("DELIVRD")
        .bind(2000_i64)
        .bind(account)
        .bind("42")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(part, ("u1".to_owned(), "SMS".to_owned(), 1));
    let carrier: (String,) = sqlx::query_as("SELECT carrier FROM carrier_receipts")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(carrier.0, "ksc", "the hand-over still names its carrier");
}
