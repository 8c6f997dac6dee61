//! Receipts on another session of the SMSC account than the submit's (SMPP 3.4 lets an
//! SMSC use any of them): another bind of the carrier, another carrier bound to the same
//! account, another node's bind. Each is matched by the SMSC's message id.

use kep_testkit::Setup;
use serde_json::Value;

use super::{by_number, send, smpp, smsc};
use crate::common::{Server, eventually, sms, spawn_on};

/// Two carriers bound to one account by prefix, the first with two binds.
fn by_prefix(port: u16) -> Vec<kep_messaging::carriers::CarrierSettings> {
    let mut ksc010 = smpp("ksc-010", port);
    ksc010.prefixes = vec!["8210".into()];
    ksc010.binds = 2;
    let mut ksc011 = smpp("ksc-011", port);
    ksc011.prefixes = vec!["8211".into()];
    vec![ksc010, ksc011]
}

/// Once every bind of every carrier of `server` is up.
async fn all_up(server: &Server) {
    eventually(
        std::time::Duration::from_secs(30),
        "every carrier up",
        async || {
            let carriers = server.operator_get("/admin/v1/messaging/carriers").await;
            let up = carriers
                .as_array()
                .into_iter()
                .flatten()
                .all(|c| c["state"] == "up");
            if up { Ok(()) } else { Err(carriers) }
        },
    )
    .await;
}

/// Sends to `numbers` through `server`; each message's final status, and the carrier its
/// hand-over names.
async fn settled(server: &Server, token: &str, numbers: &[String]) -> Vec<(String, String)> {
    let mut uids = Vec::new();
    for (i, number) in numbers.iter().enumerate() {
        uids.push(send(server, token, &sms(&format!("m{i}"), number)).await);
    }
    let mut settled = Vec::new();
    for uid in &uids {
        let status = server.settled(token, uid).await["status_code"].clone();
        let path = format!("/admin/v1/messaging/messages/{uid}");
        let carrier = server.operator_get(&path).await["timeline"][1]["carrier"].clone();
        settled.push((text(&status), text(&carrier)));
    }
    settled
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// 8210… numbers (carrier ksc-010) and 8211… (ksc-011) in turn, delivered (…5678) or
/// undeliverable (…0000): the numbers, and what each should end as.
fn numbers(n: usize) -> (Vec<String>, Vec<(String, String)>) {
    (0..n)
        .map(|i| {
            let (prefix, carrier) = if i % 2 == 0 {
                ("8210", "ksc-010")
            } else {
                ("8211", "ksc-011")
            };
            let (last, status) = if i % 4 < 2 {
                ("5678", "API_200")
            } else {
                ("0000", "API_510")
            };
            (
                format!("{prefix}1234{last}"),
                (status.to_owned(), carrier.to_owned()),
            )
        })
        .unzip()
}

#[tokio::test]
async fn a_receipt_on_another_bind_or_carrier_of_the_account_decides_its_message() {
    let smsc = smsc(by_number()).await;
    smsc.deliver_receipts_elsewhere();
    let server = crate::common::spawn_with(|s| s.carriers = by_prefix(smsc.port())).await;
    let (id, secret) = server.client().await;
    let token = server.token(&id, &secret).await;
    all_up(&server).await;
    assert_eq!(smsc.binds(), 3);

    let (numbers, expected) = numbers(12);
    assert_eq!(settled(&server, &token, &numbers).await, expected);
    assert_eq!(smsc.received().len(), 12, "each handed over once");
}

#[tokio::test]
async fn a_receipt_on_another_nodes_bind_decides_its_message() {
    let Some(url) = kep_testkit::database_for_a_test().await else {
        eprintln!("no KEP_TEST_DATABASE_URL: nothing to test against");
        return;
    };
    let smsc = smsc(by_number()).await;
    smsc.deliver_receipts_elsewhere();
    let port = smsc.port();
    let a = spawn_on(Setup::on(Some(url.clone())), |s| {
        s.carriers = by_prefix(port)
    })
    .await;
    all_up(&a).await;
    let b = spawn_on(Setup::on(Some(url)), |s| s.carriers = by_prefix(port)).await;
    all_up(&b).await;
    assert_eq!(smsc.binds(), 6);
    let (id, secret) = a.client().await;
    let token = a.token(&id, &secret).await;

    // The receipts of node a's submits go to the account's other five sessions in turn:
    // three of them node b's.
    let (numbers, expected) = numbers(20);
    assert_eq!(settled(&a, &token, &numbers).await, expected);
    assert_eq!(smsc.received().len(), 20, "each handed over once");
}
