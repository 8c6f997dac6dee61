//! kep's carriers against a real SMS gateway, Jasmin 0.11.0 ([`crate::jasmin`]): messages
//! sent through the API reach it over SMPP or its HTTP API with the right bytes, parts and
//! coding, and its receipts (ACCEPTD) make them 200; Jasmin down at kep's start, restarted
//! under load, or throttling: nothing is lost.

use std::time::Duration;

use kep_messaging::carriers::CarrierSettings;
use serde_json::json;

use super::{kep_with, send, settled_in_time, utf16be};
use crate::common::{Server, sms, spawn_with};
use crate::jasmin::{Jasmin, JasminOptions, JasminSubmit};

fn smpp_to(jasmin: &Jasmin) -> CarrierSettings {
    serde_json::from_value(json!({
        "name": "jasmin", "kind": "smpp", "host": "127.0.0.1", "port": jasmin.smpp_port,
        "system_id": jasmin.username, "password": jasmin.password, "enquire_link_s": 5,
    }))
    .unwrap()
}

/// What Jasmin sent on to `destination`, each message once it has it.
async fn at_jasmin(jasmin: &Jasmin, destination: &str, messages: usize) -> Vec<JasminSubmit> {
    crate::common::eventually(
        Duration::from_secs(30),
        &format!("{messages} messages to {destination} at Jasmin"),
        async || {
            let got: Vec<JasminSubmit> = jasmin
                .received()
                .into_iter()
                .filter(|m| m.destination() == destination)
                .collect();
            if got.len() >= messages {
                Ok(got)
            } else {
                Err(got.len())
            }
        },
    )
    .await
}

async fn assert_200(server: &Server, token: &str, uid: &str) {
    let v = settled_in_time(server, token, uid).await;
    assert_eq!(v["status_code"], "API_200", "{v}");
}

#[tokio::test]
async fn korean_sm_and_lm_reach_jasmin_as_ucs2_parts_and_its_receipts_make_them_200() {
    let jasmin = Jasmin::start().await;
    let (server, token) = kep_with(vec![smpp_to(&jasmin)]).await;
    let sm = send(&server, &token, &sms("sm", "821011110001")).await;
    let text: String = "가나다라마바사아자차".repeat(20);
    let lm = json!({"cid": "lm", "message_type": "LM", "phone_number": "821011110002",
        "title": "제목", "message": text, "sender_no": "0212345678"});
    let lm = send(&server, &token, &lm).await;
    assert_200(&server, &token, &sm).await;
    assert_200(&server, &token, &lm).await;

    let got = at_jasmin(&jasmin, "821011110001", 1).await;
    assert_eq!(got.len(), 1, "handed over once");
    assert_eq!(got[0].data_coding(), 8);
    assert_eq!(got[0].content(), utf16be("안녕하세요"));
    assert_eq!(got[0].pdus[0].source_addr, "0212345678");

    // kep's parts are messages of their own to Jasmin: 203 UTF-16 units at 67 a part, each
    // with the same 8-bit reference.
    let parts = at_jasmin(&jasmin, "821011110002", 4).await;
    assert_eq!(parts.len(), 4);
    let mut whole: Vec<u8> = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let concat = p.pdus[0].concat().expect("a UDH");
        assert_eq!(
            (concat.total, concat.seq),
            (4, u8::try_from(i + 1).unwrap())
        );
        assert_eq!(p.data_coding(), 8);
        whole.extend(p.pdus[0].payload());
    }
    assert_eq!(whole, utf16be(&format!("제목\n{text}")));
}

#[tokio::test]
async fn jasmin_down_at_keps_start_gets_the_message_once_when_it_comes_up() {
    let mut jasmin = Jasmin::start().await;
    jasmin.stop().await;
    let (server, token) = kep_with(vec![smpp_to(&jasmin)]).await;
    let uid = send(&server, &token, &sms("late", "821011110003")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let carriers = server.operator_get("/admin/v1/messaging/carriers").await;
    assert_eq!(carriers[0]["state"], "connecting", "{carriers}");

    jasmin.restart().await;
    assert_200(&server, &token, &uid).await;
    assert_eq!(at_jasmin(&jasmin, "821011110003", 1).await.len(), 1);
}

#[tokio::test]
async fn jasmin_killed_and_restarted_under_load_loses_nothing() {
    let mut jasmin = Jasmin::start().await;
    let carriers = vec![smpp_to(&jasmin)];
    // A receipt Jasmin owed when it was killed may never come: the receipt deadline decides.
    let server = spawn_with(|s| {
        s.carriers = carriers;
        s.carrier_retry_s = 3600;
        s.receipt_timeout_s = 120;
    })
    .await;
    let (id, secret) = server.client().await;
    let token = server.token(&id, &secret).await;
    let mut sent = Vec::new();
    for i in 0..40 {
        let number = format!("8210222{i:05}");
        sent.push((
            send(&server, &token, &sms(&format!("l{i}"), &number)).await,
            number,
        ));
        if i == 20 {
            jasmin.kill().await;
        }
        if i == 30 {
            jasmin.restart().await;
        }
    }
    // Every message ends final: 200 once Jasmin's receipt came, having reached Jasmin (at
    // least once: a submit cut off by the kill may have reached it before); 520 at the
    // receipt deadline where Jasmin lost the receipt it owed (around its kill and restart).
    let mut delivered = 0;
    for (i, (uid, number)) in sent.iter().enumerate() {
        let v = settled_in_time(&server, &token, uid).await;
        match v["status_code"].as_str() {
            Some("API_200") => {
                assert!(!at_jasmin(&jasmin, number, 1).await.is_empty());
                delivered += 1;
            }
            Some("API_520") => assert_eq!(
                v["error_message"], "no delivery receipt in time (messaging.receipt_timeout_s)",
                "message {i}: {v}"
            ),
            _ => panic!("message {i}: {v}"),
        }
    }
    assert!(delivered > 0);
}

#[tokio::test]
async fn a_throttling_jasmin_is_honoured_and_nothing_is_lost() {
    let jasmin = Jasmin::start().await;
    // Jasmin answers ESME_RTHROTTLED past 2 submits a second from the user.
    jasmin
        .jcli(&[
            "user -u kep",
            "mt_messaging_cred quota smpps_throughput 2",
            "ok",
        ])
        .await;
    let (server, token) = kep_with(vec![smpp_to(&jasmin)]).await;
    let mut uids = Vec::new();
    for i in 0..8 {
        uids.push(send(&server, &token, &sms(&format!("t{i}"), "821011110004")).await);
    }
    for uid in &uids {
        assert_200(&server, &token, uid).await;
    }
    assert_eq!(
        at_jasmin(&jasmin, "821011110004", 8).await.len(),
        8,
        "each once"
    );
    let carriers = server.operator_get("/admin/v1/messaging/carriers").await;
    assert!(carriers[0]["throttled"].as_u64().unwrap() > 0, "{carriers}");
}

#[tokio::test]
async fn the_http_connector_sends_through_jasmins_send_and_its_dlr_makes_it_200() {
    let jasmin = Jasmin::start_with(JasminOptions {
        terminal_receipts: true,
    })
    .await;
    let carrier: CarrierSettings = serde_json::from_value(json!({
        "name": "jasmin-http", "kind": "http", "url": format!("{}/send", jasmin.http_url()),
        "username": jasmin.username, "password": jasmin.password,
    }))
    .unwrap();
    let (server, token) = kep_with(vec![carrier]).await;
    let uid = send(&server, &token, &sms("h", "821011110005")).await;
    assert_200(&server, &token, &uid).await;
    let got = at_jasmin(&jasmin, "821011110005", 1).await;
    assert_eq!((got.len(), got[0].data_coding()), (1, 8));
    assert_eq!(got[0].content(), utf16be("안녕하세요"));
    let carriers = server.operator_get("/admin/v1/messaging/carriers").await;
    assert_eq!(carriers[0]["acknowledged"], 1, "{carriers}");
}

#[tokio::test]
async fn receipts_jasmin_delivers_on_any_session_of_the_account_all_find_their_message() {
    let jasmin = Jasmin::start().await;
    // One Jasmin user, four sessions: Jasmin delivers each receipt on whichever it picks.
    let mut three_binds = smpp_to(&jasmin);
    three_binds.name = "jasmin-010".into();
    three_binds.prefixes = vec!["8210".into()];
    three_binds.binds = 3;
    let mut one_bind = smpp_to(&jasmin);
    one_bind.name = "jasmin-011".into();
    one_bind.prefixes = vec!["8211".into()];
    // The receipt deadline out of reach of the clock `settled_in_time` moves on: a receipt
    // late on a loaded machine would otherwise pass it, and the message be handed over again.
    let server = spawn_with(|s| {
        s.carriers = vec![three_binds, one_bind];
        s.carrier_retry_s = 3600;
        s.receipt_timeout_s = 86_400;
    })
    .await;
    let (id, secret) = server.client().await;
    let token = server.token(&id, &secret).await;
    let mut uids = Vec::new();
    for i in 0..200 {
        let prefix = if i % 2 == 0 { "8210" } else { "8211" };
        let number = format!("{prefix}333{i:05}");
        uids.push(send(&server, &token, &sms(&format!("a{i}"), &number)).await);
    }
    // Each ends 200 by its receipt (ACCEPTD), none waits for the receipt deadline.
    for uid in &uids {
        let v = settled_in_time(&server, &token, uid).await;
        assert_eq!(
            (&v["status_code"], &v["error_message"]),
            (&json!("API_200"), &serde_json::Value::Null),
            "{v}"
        );
    }
    // Each carrier took its prefix's 100, once: the clock moves past the dispatch lease
    // while hand-overs are still being recorded (under PostgreSQL a commit takes longer),
    // and a claim meanwhile must not hand a message over again.
    let carriers = server.operator_get("/admin/v1/messaging/carriers").await;
    for c in &carriers.as_array().unwrap()[..2] {
        assert_eq!(c["state"], "up", "{carriers}");
        let acknowledged = c["acknowledged"].as_u64().unwrap();
        assert_eq!(acknowledged, 100, "{carriers}");
        assert_eq!(c["submitted"], acknowledged, "{carriers}");
    }
}
