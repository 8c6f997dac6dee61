//! The adapter's part of the platform's activity stream: an org login type's life and each
//! DRM session's, from the request to its release or expiry, in order.

use std::time::Duration;

use kep_api::adapter::{DrmRequest, FileType};
use kep_client::activity::{Events, Watch, Watched};
use kep_client::adapter::AgentClient;
use reqwest::multipart::Part;
use serde_json::Value;

use crate::common::*;

async fn next(events: &mut Events) -> (String, String, Value) {
    let got = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
    match got.expect("an event within 10 s").unwrap().unwrap() {
        Watched::Event(e) => {
            // Its ids, each by its name, are its object's.
            let ids = [&e.ids.org_login_type_id, &e.ids.session_id];
            let named: Vec<&str> = ids.iter().filter_map(|i| i.as_deref()).collect();
            assert_eq!((named.join("/"), &e.kind), (e.object.clone(), &e.event));
            (e.event, e.object, Value::Object(e.detail))
        }
        Watched::Lagged(n) => panic!("lagged by {n}"),
    }
}

#[tokio::test]
async fn an_org_and_its_drm_sessions_are_activity_events_in_order() {
    let srv = spawn(|s| {
        s.session_ttl_s = 5;
        s.sweep_interval_s = 1;
    })
    .await;
    let watch = Watch {
        service: Some("adapter".into()),
        ..Watch::default()
    };
    let mut events = srv.admin.events(&watch).await.unwrap();
    let mut agent_srv = agent(0).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let (event, object, detail) = next(&mut events).await;
    assert_eq!(
        (event.as_str(), object),
        ("org_login_type.created", org.id.to_string())
    );
    assert_eq!(detail["method"], "OAUTH2");
    assert!(!detail.to_string().contains(&org.secret_key), "no secret");
    let agent = AgentClient::new(&srv.adapter_url, org.id, "Secret", &org.secret_key);

    // Requested, notified, granted, released.
    let ask = |file: &str| DrmRequest {
        org_login_type_id: org.id,
        file_id: file.into(),
        file_type: FileType::Drm,
        user: None,
    };
    let session = srv
        .admin
        .drm_request(&ask("doc-1"))
        .await
        .unwrap()
        .session_id;
    next_notice(&mut agent_srv).await;
    let object = format!("{}/{session}", org.id);
    let (event, on, detail) = next(&mut events).await;
    assert_eq!(
        (event.as_str(), on.as_str()),
        ("drm_session.requested", object.as_str())
    );
    assert_eq!(detail["fileId"], "doc-1");
    let (event, _, detail) = next(&mut events).await;
    assert_eq!(
        (event.as_str(), detail["status"].as_u64()),
        ("drm_session.agent_notified", Some(204))
    );
    agent
        .upload_result(&session, "doc-1", FileType::Drm, &result("SUCCESS"))
        .await
        .unwrap();
    let (event, _, detail) = next(&mut events).await;
    assert_eq!(
        (event.as_str(), detail["reason"].as_str()),
        ("drm_session.granted", Some("policy"))
    );
    let part = Part::bytes(vec![7u8; 1000]).file_name("doc-1.pdf");
    agent
        .upload_decrypted(&session, "doc-1", part)
        .await
        .unwrap();
    let (event, _, detail) = next(&mut events).await;
    assert_eq!(
        (event.as_str(), detail["size"].as_u64()),
        ("drm_session.released", Some(1000))
    );

    // Denied; and one left alone expires.
    let denied = srv
        .admin
        .drm_request(&ask("doc-2"))
        .await
        .unwrap()
        .session_id;
    next_notice(&mut agent_srv).await;
    let alone = srv
        .admin
        .drm_request(&ask("doc-3"))
        .await
        .unwrap()
        .session_id;
    next_notice(&mut agent_srv).await;
    agent
        .upload_result(&denied, "doc-2", FileType::Drm, &result("FAILURE"))
        .await
        .unwrap();
    srv.clock.advance(Duration::from_secs(6));
    let mut seen = Vec::new();
    while seen.len() < 6 {
        let (event, on, _) = next(&mut events).await;
        seen.push((event, on));
    }
    let object = |s: &str| format!("{}/{s}", org.id);
    for (event, on) in [
        ("drm_session.requested", object(&denied)),
        ("drm_session.agent_notified", object(&denied)),
        ("drm_session.requested", object(&alone)),
        ("drm_session.agent_notified", object(&alone)),
        ("drm_session.denied", object(&denied)),
        ("drm_session.expired", object(&alone)),
    ] {
        assert!(seen.contains(&(event.to_owned(), on)), "{seen:?}");
    }

    srv.admin.delete_org(org.id).await.unwrap();
    let (event, _, detail) = next(&mut events).await;
    assert_eq!(
        (event.as_str(), detail["sessions"].as_u64()),
        ("org_login_type.deleted", Some(3))
    );
}
