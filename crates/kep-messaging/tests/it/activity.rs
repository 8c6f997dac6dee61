//! The messaging service's part of the platform's activity stream: a client's life and
//! each message's, from accepted to its final status, in order.

use std::time::Duration;

use kep_client::AdminClient;
use kep_client::activity::{Watch, Watched};
use serde_json::Value;

use crate::common::{OPERATOR_TOKEN, rcs, sms, spawn};

#[tokio::test]
async fn a_client_and_its_messages_are_activity_events_in_order() {
    let srv = spawn().await;
    let admin = AdminClient::new(&srv.admin, OPERATOR_TOKEN);
    let watch = Watch {
        service: Some("messaging".into()),
        ..Watch::default()
    };
    let mut events = admin.events(&watch).await.unwrap();
    let mut next = async || -> (String, String, Value) {
        let got = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
        match got.expect("an event within 10 s").unwrap().unwrap() {
            Watched::Event(e) => {
                // Its ids, each by its name, are its object's.
                let named: Vec<&str> = [&e.ids.client_id, &e.ids.uid]
                    .iter()
                    .filter_map(|i| i.as_deref())
                    .collect();
                assert_eq!((named.join("/"), &e.kind), (e.object.clone(), &e.event));
                (e.event, e.object, Value::Object(e.detail))
            }
            Watched::Lagged(n) => panic!("lagged by {n}"),
        }
    };
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    assert_eq!(next().await.0, "client.created");

    // Delivered.
    let (_, v) = srv
        .post(&token, "/v2/send/xms", &sms("c-1", "821012345678"))
        .await;
    let uid = v["uid"].as_str().unwrap();
    let object = format!("{id}/{uid}");
    let (event, on, detail) = next().await;
    assert_eq!(
        (event.as_str(), on.as_str()),
        ("message.accepted", object.as_str())
    );
    assert_eq!(
        (detail["channel"].as_str(), detail["cid"].as_str()),
        (Some("XMS"), Some("c-1"))
    );
    let (event, on, detail) = next().await;
    assert_eq!(
        (event.as_str(), on.as_str()),
        ("message.handed_over", object.as_str())
    );
    assert_eq!(detail["route"], "XMS");
    let (event, _, detail) = next().await;
    assert_eq!(
        (event.as_str(), detail["status"].as_str()),
        ("message.finished", Some("200"))
    );

    // An RCS message the carrier fails, sent again as an SMS: two hand-overs, then 200.
    let mut body = rcs("c-2", "821012340000");
    body["fall_back_yn"] = true.into();
    body["fall_back_message_type"] = "SM".into();
    body["fall_back_message"] = "m".into();
    let (_, v) = srv.post(&token, "/v2/send/rcs", &body).await;
    assert!(v["uid"].is_string(), "{v}");
    let seen: Vec<(String, Value)> = [next().await, next().await, next().await, next().await]
        .into_iter()
        .map(|(e, _, d)| (e, d))
        .collect();
    let names: Vec<&str> = seen.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        names,
        [
            "message.accepted",
            "message.handed_over",
            "message.handed_over",
            "message.finished"
        ]
    );
    assert_eq!(seen[1].1["route"], "RCS");
    assert_eq!(seen[2].1["route"], "FALLBACK_SM");

    let res = srv
        .http
        .delete(format!("{}/admin/v1/messaging/clients/{id}", srv.admin))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    let status = res.status();
    assert!(
        status.is_success(),
        "{status}: {}",
        res.text().await.unwrap()
    );
    assert_eq!(next().await.0, "client.deleted");
}
