//! Carriers end to end: messages sent through the API leave over a real SMPP 3.4 bind to a
//! small SMSC (`kep_smpp::smsc`), whose receipts decide their status; routing, failover, a
//! carrier down at start, throttling and receipts that never come.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kep_messaging::carriers::{CarrierKind, CarrierSettings};
use kep_smpp::smsc::{Smsc, SmscBehaviour};
use kep_smpp::{DataCoding, LongText, MessageState};
use serde_json::{Value, json};

use crate::common::{Server, eventually, sms, spawn_with};

mod accounts;
mod jasmin;

const SYSTEM_ID: &str = "kep";
const PASSWORD: &str = "secret";

/// Receipts by the number's last four digits: 0000 undeliverable, 0001 rejected, 0009
/// none at all; any other delivered.
fn by_number() -> SmscBehaviour {
    SmscBehaviour {
        receipt: Arc::new(|to: &str| match &to[to.len().saturating_sub(4)..] {
            "0000" => Some(MessageState::Undeliverable),
            "0001" => Some(MessageState::Rejected),
            "0009" => None,
            _ => Some(MessageState::Delivered),
        }),
        throttle_first: 0,
        system_id: SYSTEM_ID.into(),
        password: PASSWORD.into(),
        record: true,
    }
}

async fn smsc(behaviour: SmscBehaviour) -> Smsc {
    Smsc::start("127.0.0.1:0".parse().unwrap(), behaviour)
        .await
        .unwrap()
}

/// A loopback port nothing listens on (yet).
/// A port nothing listens on, that no other test's listener can be given meanwhile: below
/// the kernel's ephemeral range (32768 up, by default), where listeners bound to port 0 go.
/// (One picked by binding port 0 was once handed to another test's SMSC while its test
/// still counted on it being down.)
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    // Each test process starts elsewhere in 20000..32000, so two at once rarely meet.
    let base = 20_000 + u16::try_from(std::process::id() % 6_000).unwrap();
    loop {
        let port = base + NEXT.fetch_add(1, Ordering::Relaxed) % 6_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn smpp(name: &str, port: u16) -> CarrierSettings {
    let mut s: CarrierSettings = serde_json::from_value(json!({
        "name": name, "kind": "smpp", "host": "127.0.0.1", "port": port,
        "system_id": SYSTEM_ID, "password": PASSWORD, "source_addr": "1588",
    }))
    .unwrap();
    s.enquire_link_s = 1;
    s
}

/// kep with `carriers`; a message is tried again for an hour of its clock (which these
/// tests move on, [`settled_in_time`]) while they are down.
async fn kep_with(carriers: Vec<CarrierSettings>) -> (Server, String) {
    let server = spawn_with(|s| {
        s.carriers = carriers;
        s.carrier_retry_s = 3600;
    })
    .await;
    let (id, secret) = server.client().await;
    let token = server.token(&id, &secret).await;
    (server, token)
}

async fn send(server: &Server, token: &str, body: &Value) -> String {
    let (status, v) = server.post(token, "/v2/send/xms", body).await;
    assert_eq!(status, 200, "{v}");
    v["uid"].as_str().unwrap().to_owned()
}

/// The XMS detail once the message is final, moving the service's clock on meanwhile: a
/// message whose carrier was down is tried again after a back-off on that clock, which
/// stands still in these tests.
async fn settled_in_time(server: &Server, token: &str, uid: &str) -> Value {
    let path = format!("/v2/info/message/search/detail/{uid}");
    eventually(
        Duration::from_secs(60),
        &format!("{uid} settles"),
        async || {
            server.clock.advance(Duration::from_secs(3));
            let (_, v) = server.get(token, &path).await;
            if v["result"]["status_code"] == "API_100" {
                Err(v)
            } else {
                Ok(v["result"].clone())
            }
        },
    )
    .await
}

fn utf16be(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

#[tokio::test]
async fn receipts_from_an_smpp_carrier_decide_each_message() {
    let smsc = smsc(by_number()).await;
    let (server, token) = kep_with(vec![smpp("smsc", smsc.port())]).await;
    let delivered = send(&server, &token, &sms("d", "821012345678")).await;
    let undeliverable = send(&server, &token, &sms("u", "821012340000")).await;
    let rejected = send(&server, &token, &sms("r", "821012340001")).await;

    let d = server.settled(&token, &delivered).await;
    assert_eq!(d["status_code"], "API_200", "{d}");
    for uid in [&undeliverable, &rejected] {
        let v = server.settled(&token, uid).await;
        assert_eq!(v["status_code"], "API_510", "{v}");
    }
    // The SMSC got each once, as UCS-2 with a receipt asked for, from the sender number.
    let received = smsc.received();
    assert_eq!(received.len(), 3);
    let first = received
        .iter()
        .find(|s| s.destination == "821012345678")
        .unwrap();
    assert_eq!(
        (
            first.data_coding,
            first.registered_delivery & 1,
            first.source.as_str()
        ),
        (8, 1, "0212345678")
    );
    assert_eq!(first.short_message, utf16be("안녕하세요"));
    // The outbox names the carrier each went to.
    let outbox = server.outbox().await;
    assert!(
        outbox
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["outcome"] == "API_200" || e["outcome"] == "API_510"),
        "{outbox}"
    );
}

#[tokio::test]
async fn long_text_goes_in_udh_parts_or_whole_in_the_payload() {
    let text: String = "가나다라마바사아자차".repeat(20); // 200 Hangul: 400 CP949 bytes
    let lm = json!({"cid": "lm", "message_type": "LM", "phone_number": "821012345678",
        "title": "제목", "message": text, "sender_no": "0212345678"});
    let whole = format!("제목\n{text}");

    let udh = smsc(by_number()).await;
    let (server, token) = kep_with(vec![smpp("udh", udh.port())]).await;
    let uid = send(&server, &token, &lm).await;
    assert_eq!(server.settled(&token, &uid).await["status_code"], "API_200");
    let parts = udh.received();
    // 203 UTF-16 units at 67 a part.
    assert_eq!(parts.len(), 4);
    let mut joined = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(p.esm_class & 0x40, 0x40, "UDH indicator");
        let header = &p.short_message[..6];
        assert_eq!((header[0], header[1], header[2]), (5, 0, 3));
        assert_eq!((header[4], header[5]), (4, u8::try_from(i + 1).unwrap()));
        joined.extend_from_slice(&p.short_message[6..]);
    }
    assert_eq!(joined, utf16be(&whole));

    let payload = smsc(by_number()).await;
    let mut carrier = smpp("payload", payload.port());
    carrier.long_text = LongText::Payload;
    carrier.data_coding = DataCoding::Ksc5601;
    let (server, token) = kep_with(vec![carrier]).await;
    let uid = send(&server, &token, &lm).await;
    assert_eq!(server.settled(&token, &uid).await["status_code"], "API_200");
    let received = payload.received();
    assert_eq!(received.len(), 1);
    let (cp949, _, _) = encoding_rs::EUC_KR.encode(&whole);
    assert_eq!(received[0].data_coding, 0x0E);
    assert!(received[0].short_message.is_empty());
    assert_eq!(received[0].message_payload.as_deref(), Some(&*cp949));
}

#[tokio::test]
async fn a_carrier_down_at_start_gets_the_message_once_it_is_up() {
    let port = free_port();
    let (server, token) = kep_with(vec![smpp("late", port)]).await;
    let uid = send(&server, &token, &sms("late", "821012345678")).await;
    let carriers = server.operator_get("/admin/v1/messaging/carriers").await;
    assert_eq!(carriers[0]["state"], "connecting", "{carriers}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, v) = server
        .get(&token, &format!("/v2/info/message/search/detail/{uid}"))
        .await;
    assert_eq!(v["result"]["status_code"], "API_100", "it waits: {v}");

    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let smsc = Smsc::start(addr, by_number()).await.unwrap();
    let settled = settled_in_time(&server, &token, &uid).await;
    assert_eq!(settled["status_code"], "API_200", "{settled}");
    assert_eq!(smsc.submits(), 1, "handed over once");
    let carriers = server.operator_get("/admin/v1/messaging/carriers").await;
    assert_eq!(
        (
            carriers[0]["state"].as_str(),
            carriers[0]["acknowledged"].as_u64()
        ),
        (Some("up"), Some(1)),
        "{carriers}"
    );
}

#[tokio::test]
async fn a_carrier_that_is_down_passes_its_messages_to_the_next() {
    let up = smsc(by_number()).await;
    let (server, token) = kep_with(vec![smpp("down", free_port()), smpp("up", up.port())]).await;
    let uid = send(&server, &token, &sms("f", "821012345678")).await;
    assert_eq!(server.settled(&token, &uid).await["status_code"], "API_200");
    assert_eq!(up.submits(), 1);
    let carriers = server.operator_get("/admin/v1/messaging/carriers").await;
    let names: Vec<&str> = carriers
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["down", "up", "simulator"]);
}

#[tokio::test]
async fn prefixes_and_types_route_and_the_simulator_takes_the_rest() {
    let smsc = smsc(by_number()).await;
    let mut carrier = smpp("seoul", smsc.port());
    carrier.prefixes = vec!["8210".into()];
    carrier.types = vec!["SM".into()];
    let (server, token) = kep_with(vec![carrier]).await;
    let routed = send(&server, &token, &sms("a", "821012345678")).await;
    let other_number = send(&server, &token, &sms("b", "821112345678")).await;
    for uid in [&routed, &other_number] {
        assert_eq!(server.settled(&token, uid).await["status_code"], "API_200");
    }
    assert_eq!(smsc.submits(), 1, "only 8210… went to the SMSC");
}

#[tokio::test]
async fn a_throttling_smsc_slows_kep_down_and_loses_nothing() {
    let mut behaviour = by_number();
    behaviour.throttle_first = 3;
    let smsc = smsc(behaviour).await;
    let (server, token) = kep_with(vec![smpp("busy", smsc.port())]).await;
    let mut uids = Vec::new();
    for i in 0..5 {
        uids.push(send(&server, &token, &sms(&format!("t{i}"), "821012345678")).await);
    }
    for uid in &uids {
        assert_eq!(server.settled(&token, uid).await["status_code"], "API_200");
    }
    assert_eq!(smsc.received().len(), 5, "each accepted once");
    assert_eq!(
        smsc.submits(),
        8,
        "the three throttled submits were sent again"
    );
}

#[tokio::test]
async fn a_receipt_that_never_comes_ends_520_at_the_receipt_timeout() {
    let smsc = smsc(by_number()).await;
    let carriers = vec![smpp("silent", smsc.port())];
    let server = spawn_with(|s| {
        s.carriers = carriers;
        s.receipt_timeout_s = 60;
    })
    .await;
    let (id, secret) = server.client().await;
    let token = server.token(&id, &secret).await;
    let uid = send(&server, &token, &sms("s", "821012340009")).await;
    eventually(Duration::from_secs(30), "the SMSC has it", async || {
        if smsc.submits() == 1 {
            Ok(())
        } else {
            Err("not yet")
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, v) = server
        .get(&token, &format!("/v2/info/message/search/detail/{uid}"))
        .await;
    assert_eq!(v["result"]["status_code"], "API_100", "{v}");
    server.clock.advance(Duration::from_secs(61));
    let v = server.settled(&token, &uid).await;
    assert_eq!(v["status_code"], "API_520", "{v}");
}

#[test]
fn a_carrier_kind_that_carries_no_rcs_refuses_rcs_types() {
    let mut s = smpp("x", 1);
    s.types = vec!["RCSSMS".into()];
    assert_eq!(s.kind, CarrierKind::Smpp);
    assert!(
        s.types()
            .unwrap_err()
            .to_string()
            .contains("carries no RCS")
    );
}

#[tokio::test]
async fn an_rcs_that_fails_falls_back_to_an_sms_through_the_same_routing() {
    let smsc = smsc(by_number()).await;
    let mut carrier = smpp("sms", smsc.port());
    carrier.types = vec!["SM".into(), "LM".into()];
    let (server, token) = kep_with(vec![carrier]).await;
    // The simulator carries the RCS: 0002 has none.
    let mut body = crate::common::rcs("r", "821012340002");
    body["fall_back_yn"] = json!(true);
    body["fall_back_message_type"] = json!("SM");
    body["fall_back_message"] = json!("대신 문자");
    let (status, v) = server.post(&token, "/v2/send/rcs", &body).await;
    assert_eq!(status, 200, "{v}");
    let uid = v["uid"].as_str().unwrap();
    let detail = server.rcs_settled(&token, uid).await;
    assert_eq!(
        (
            &detail["status"],
            &detail["rcs_status"],
            &detail["fallback_status"]
        ),
        (&json!("API_200"), &json!("fail"), &json!("success")),
        "{detail}"
    );
    let received = smsc.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].short_message, utf16be("대신 문자"));
}

/// A gateway's `/send`: answers `Success "<to>"`, then `padding`, and hands each form over.
async fn gateway(
    padding: usize,
) -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<Vec<(String, String)>>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/send",
        axum::routing::post(move |axum::Form(form): axum::Form<Vec<(String, String)>>| {
            let to = form.iter().find(|(k, _)| k == "to").unwrap().1.clone();
            let _ = tx.send(form);
            async move { format!("Success \"{to}\"{}", " ".repeat(padding)) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/send", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

/// kep with one HTTP carrier, `gw`, at `url`; receipts are awaited a minute.
async fn kep_with_gateway(url: &str) -> (Server, String) {
    let carrier: CarrierSettings = serde_json::from_value(json!({
        "name": "gw", "kind": "http", "url": url, "username": "kep", "password": "pw",
    }))
    .unwrap();
    let server = spawn_with(|s| {
        s.carriers = vec![carrier];
        s.public_url = Some("http://kep.example:8803".into());
        s.receipt_timeout_s = 60;
    })
    .await;
    let (id, secret) = server.client().await;
    let token = server.token(&id, &secret).await;
    (server, token)
}

/// The query of the dlr-url the gateway was given with the next send.
async fn dlr_query(
    sends: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<(String, String)>>,
) -> String {
    let form = sends.recv().await.unwrap();
    let dlr_url = form.iter().find(|(k, _)| k == "dlr-url").unwrap().1.clone();
    dlr_url
        .strip_prefix("http://kep.example:8803/carriers/gw/dlr?")
        .unwrap_or_else(|| panic!("{dlr_url}"))
        .to_owned()
}

#[tokio::test]
async fn an_http_gateways_receipt_needs_the_token_of_the_dlr_url_kep_gave_it() {
    let (url, mut sends) = gateway(0).await;
    let (server, token) = kep_with_gateway(&url).await;
    let uid = send(&server, &token, &sms("g", "821012345678")).await;
    let form = sends.recv().await.unwrap();
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(
        field("hex-content").unwrap(),
        hex::encode(utf16be("안녕하세요"))
    );
    assert_eq!(
        (field("coding"), field("dlr-level")),
        (Some("8".into()), Some("2".into()))
    );
    let dlr_url = field("dlr-url").unwrap();
    let query = dlr_url
        .strip_prefix("http://kep.example:8803/carriers/gw/dlr?")
        .unwrap_or_else(|| panic!("{dlr_url}"));

    let receipt = [
        ("id", "821012345678"),
        ("message_status", "DELIVRD"),
        ("level", "2"),
    ];
    let http = reqwest::Client::new();
    let post = async |carrier: &str, query: &str| {
        let res = http
            .post(format!("{}/carriers/{carrier}/dlr?{query}", server.url))
            .form(&receipt)
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.text().await.unwrap())
    };
    // A wrong token, and no carrier of that name, are answered alike.
    let wrong = post("gw", "token=nope").await;
    assert_eq!(wrong.0, 403);
    assert_eq!(post("nope", query).await, wrong);
    assert_eq!(post("nope", "token=nope").await, wrong);
    assert_eq!(post("gw", query).await, (200, "ACK/Jasmin".into()));
    assert_eq!(server.settled(&token, &uid).await["status_code"], "API_200");
}

#[tokio::test]
async fn an_http_carriers_token_changes_each_hour_and_expires_once_no_receipt_is_awaited() {
    let (url, mut sends) = gateway(0).await;
    let (server, token) = kep_with_gateway(&url).await;
    let first = send(&server, &token, &sms("a", "821012345678")).await;
    let old = dlr_query(&mut sends).await;
    // The next hour: a new token for what is sent now; the old one is still taken, as
    // its message's receipt is still awaited.
    let into_hour = server.clock.unix_s().rem_euclid(3600) as u64;
    server.clock.advance(Duration::from_secs(3600 - into_hour));
    send(&server, &token, &sms("b", "821012345679")).await;
    let new = dlr_query(&mut sends).await;
    assert_ne!(old, new);
    let http = reqwest::Client::new();
    let receipt = async |query: &str, id: &str| {
        http.post(format!("{}/carriers/gw/dlr?{query}", server.url))
            .form(&[("id", id), ("message_status", "DELIVRD")])
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(receipt(&old, "821012345678").await, 200);
    assert_eq!(
        server.settled(&token, &first).await["status_code"],
        "API_200"
    );
    // The receipt timeout (60 s) past the end of its hour, the old token is refused; the
    // new one is taken until the same time past the end of its own.
    server.clock.advance(Duration::from_secs(60));
    assert_eq!(receipt(&old, "821012345678").await, 403);
    assert_eq!(receipt(&new, "821012345679").await, 200);
    server.clock.advance(Duration::from_secs(3600));
    assert_eq!(receipt(&new, "821012345679").await, 403);
}

#[tokio::test]
async fn a_gateway_answer_over_the_cap_fails_the_submit_unread() {
    // The id it needs, then padding: past the cap, none of it is taken.
    let cap = kep_messaging::carriers::http::ANSWER_CAP;
    let (url, mut sends) = gateway(cap).await;
    let (server, token) = kep_with_gateway(&url).await;
    let uid = send(&server, &token, &sms("big", "821012345678")).await;
    sends.recv().await.unwrap();
    let v = server.settled(&token, &uid).await;
    assert_eq!(v["status_code"], "API_510", "{v}");
    assert_eq!(
        v["error_message"],
        format!("200 OK: an answer over {cap} bytes, not read"),
        "{v}"
    );
}

#[tokio::test]
async fn a_carrier_missing_what_its_kind_needs_or_with_no_window_or_binds_is_refused_at_start() {
    use kep_messaging::carriers::Carriers;
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let start = |s: CarrierSettings| {
        let dlr = kep_messaging::carriers::http::DlrSettings {
            base: "http://127.0.0.1:1".into(),
            clock: kep_core::clock::Clock::system(),
            awaited: Duration::ZERO,
        };
        Carriers::start(&[s], Duration::ZERO, &dlr, &tx)
            .err()
            .map(|e| e.to_string())
    };
    let window = |w: usize| {
        let mut s = smpp("w", free_port());
        s.window = w;
        start(s)
    };
    assert!(window(0).unwrap().contains("`window` must be at least 1"));
    assert_eq!(window(1), None);
    assert_eq!(window(2), None);
    let binds = |b: usize| {
        let mut s = smpp("b", free_port());
        s.binds = b;
        start(s)
    };
    assert_eq!(
        binds(0).as_deref(),
        Some("messaging.carriers \"b\": `binds` must be at least 1")
    );
    assert_eq!(binds(3), None);
    let mut no_host = smpp("h", 1);
    no_host.host = None;
    assert!(start(no_host).unwrap().contains("needs `host`"));
    let no_url: CarrierSettings = serde_json::from_value(json!({
        "name": "g", "kind": "http", "username": "u", "password": "p",
    }))
    .unwrap();
    assert!(start(no_url).unwrap().contains("needs `url`"));
}
