//! DRM release round trips with a real agent: notifications, results, files, the header
//! rules, expiry.

use std::time::Duration;

use kep_api::adapter::{DrmRequest, FileType, SessionStatus, UploadResult};
use kep_client::adapter::AgentClient;
use reqwest::multipart::Part;
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn a_drm_release_round_trip_with_a_real_agent() {
    let srv = spawn(|_| {}).await;
    let mut agent_srv = agent(0).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let agent = AgentClient::new(&srv.adapter_url, org.id, "Secret", &org.secret_key);

    // getOrgLoginType: every field, both synchronization names.
    let got = agent.get_org_login_type().await.unwrap();
    let got = serde_json::to_value(&got).unwrap();
    assert_eq!(got["_code"], 200);
    assert_eq!(got["_message"], "ok");
    assert_eq!(got["id"], org.id);
    assert_eq!(got["method"], "OAUTH2");
    assert_eq!(got["adapter_agent"], agent_srv.host.as_str());
    assert_eq!(
        got["data_model"]["user"]["synchronization"]["options"],
        json!(["name", "email"])
    );
    assert_eq!(
        got["data_model"]["user"]["synchronization"]["active_options"],
        json!(["name", "email"])
    );
    assert_eq!(
        got["data_model"]["login"]["oauth2"]["scopes"],
        json!(["openid", "profile"])
    );

    // The platform asks; the agent is notified.
    let created = srv
        .admin
        .drm_request(&DrmRequest {
            org_login_type_id: org.id,
            file_id: "doc-1".into(),
            file_type: FileType::Drm,
            user: Some("kim".into()),
        })
        .await
        .unwrap();
    assert_eq!(created.status, SessionStatus::Pending);
    let (headers, notice) = next_notice(&mut agent_srv).await;
    assert_eq!(notice.session_id, created.session_id);
    assert_eq!(
        (
            notice.file_id.as_str(),
            notice.file_type,
            notice.user.as_deref()
        ),
        ("doc-1", FileType::Drm, Some("kim"))
    );
    assert_eq!(
        headers["kep-agentsession"],
        format!("DSID {}", created.session_id).as_str()
    );
    assert_eq!(headers["kep-file-type"], "DRM");

    // The agent answers: SUCCESS, then the decrypted file.
    let ok = agent
        .upload_result(
            &notice.session_id,
            "doc-1",
            FileType::Drm,
            &result("SUCCESS"),
        )
        .await
        .unwrap();
    assert_eq!((ok._code, ok._message.as_str()), (200, "ok"));
    assert_eq!(
        srv.admin
            .drm_session(&notice.session_id)
            .await
            .unwrap()
            .status,
        SessionStatus::Granted
    );
    let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    agent
        .upload_decrypted(
            &notice.session_id,
            "doc-1",
            Part::bytes(content.clone()).file_name("doc-1.pdf"),
        )
        .await
        .unwrap();

    let session = srv.admin.drm_session(&notice.session_id).await.unwrap();
    assert_eq!(session.status, SessionStatus::Released);
    assert_eq!(
        (session.result.as_deref(), session.reason.as_deref()),
        (Some("SUCCESS"), Some("policy"))
    );
    assert_eq!(
        session.extra,
        Some(json!({"client_ip": "10.0.0.1", "agent": "test"}))
    );
    let file = session.file.unwrap();
    assert_eq!(file.size, content.len() as u64);
    // sha256 of the bytes, computed apart from the server.
    use sha2::Digest as _;
    assert_eq!(file.sha256, hex::encode(sha2::Sha256::digest(&content)));
    assert_eq!(session.notifications.len(), 1);
    assert_eq!(session.notifications[0].status, Some(204));

    let fetched = srv.admin.drm_file(&notice.session_id).await.unwrap();
    assert_eq!(
        fetched.headers()["content-length"],
        content.len().to_string().as_str()
    );
    assert_eq!(fetched.bytes().await.unwrap().as_ref(), content.as_slice());

    // Out of order from here on.
    let e = agent
        .upload_result(
            &notice.session_id,
            "doc-1",
            FileType::Drm,
            &result("SUCCESS"),
        )
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&e),
        (
            409,
            json!({"_code": 409, "_message": "the file was already released"})
        )
    );
    let e = agent
        .upload_decrypted(&notice.session_id, "doc-1", Part::bytes(b"again".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 409);
}

#[tokio::test]
async fn plain_files_and_out_of_order_calls() {
    let srv = spawn(|_| {}).await;
    let mut agent_srv = agent(0).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let agent = AgentClient::new(&srv.adapter_url, org.id, "Secret", &org.secret_key);
    let ask = |file_id: &str, file_type| DrmRequest {
        org_login_type_id: org.id,
        file_id: file_id.into(),
        file_type,
        user: None,
    };

    // PLAIN: SUCCESS is refused (400), FAILURE is the answer, a file is never wanted (409).
    let plain = srv
        .admin
        .drm_request(&ask("plain-1", FileType::Plain))
        .await
        .unwrap()
        .session_id;
    next_notice(&mut agent_srv).await;
    let e = agent
        .upload_result(&plain, "plain-1", FileType::Plain, &result("SUCCESS"))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 400);
    assert_eq!(
        srv.admin.drm_session(&plain).await.unwrap().status,
        SessionStatus::Pending,
        "unchanged"
    );
    let e = agent
        .upload_decrypted(&plain, "plain-1", Part::bytes(b"x".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 409);
    // `extra` is an object, or absent.
    for extra in [json!("10.0.0.1"), json!([1]), json!(null)] {
        let answer = agent
            .upload_result(
                &plain,
                "plain-1",
                FileType::Plain,
                &UploadResult {
                    extra: Some(extra.clone()),
                    ..result("FAILURE")
                },
            )
            .await;
        if extra.is_null() {
            // JSON's null is no `extra` at all: the field is optional.
            assert!(answer.is_ok(), "{answer:?}");
            break;
        }
        assert_eq!(
            api_status(&answer.unwrap_err()),
            (
                400,
                json!({"_code": 400, "_message": "extra must be an object"})
            ),
            "{extra}"
        );
    }
    assert_eq!(
        srv.admin.drm_session(&plain).await.unwrap().status,
        SessionStatus::Denied
    );
    let e = srv.admin.drm_file(&plain).await.unwrap_err();
    assert_eq!(api_status(&e).0, 409);

    // DRM: a file before any result is 409; a second result is 409; DENIED takes no file.
    let drm = srv
        .admin
        .drm_request(&ask("drm-1", FileType::Drm))
        .await
        .unwrap()
        .session_id;
    next_notice(&mut agent_srv).await;
    let e = agent
        .upload_decrypted(&drm, "drm-1", Part::bytes(b"x".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 409);
    let e = agent
        .upload_result(&drm, "drm-1", FileType::Drm, &result("MAYBE"))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 400);
    let e = agent
        .upload_result(&drm, "drm-1", FileType::Plain, &result("FAILURE"))
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&e).0,
        400,
        "Kep-File-Type must match the session's file"
    );
    agent
        .upload_result(&drm, "drm-1", FileType::Drm, &result("FAILURE"))
        .await
        .unwrap();
    let e = agent
        .upload_result(&drm, "drm-1", FileType::Drm, &result("SUCCESS"))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 409);
    let e = agent
        .upload_decrypted(&drm, "drm-1", Part::bytes(b"x".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 409);

    // Unknown session, wrong file id, another org's session: 404.
    let e = agent
        .upload_result("nope", "drm-1", FileType::Drm, &result("SUCCESS"))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 404);
    let other = srv
        .admin
        .drm_request(&ask("drm-2", FileType::Drm))
        .await
        .unwrap()
        .session_id;
    let e = agent
        .upload_result(&other, "wrong-file", FileType::Drm, &result("SUCCESS"))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 404);
    let org2 = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let agent2 = AgentClient::new(&srv.adapter_url, org2.id, "Secret", &org2.secret_key);
    let e = agent2
        .upload_result(&other, "drm-2", FileType::Drm, &result("SUCCESS"))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 404);
    assert_eq!(
        srv.admin.drm_session(&other).await.unwrap().status,
        SessionStatus::Pending
    );
}

#[tokio::test]
async fn headers_are_checked_and_every_answer_has_the_documented_shape() {
    let srv = spawn(|_| {}).await;
    let org = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
    let url = format!("{}/api/trust/login/v0/getOrgLoginType", srv.adapter_url);
    let auth = format!("Secret {}", org.secret_key);
    let id = format!("ID {}", org.id);
    let cases: Vec<(Vec<(&str, &str)>, u16)> = vec![
        (vec![("Kep-OrgLoginType", &id)], 400),
        (vec![("Authorization", &auth)], 400),
        (
            vec![
                ("Authorization", &org.secret_key),
                ("Kep-OrgLoginType", &id),
            ],
            400,
        ),
        (
            vec![("Authorization", &auth), ("Kep-OrgLoginType", &id[3..])],
            400,
        ),
        (
            vec![("Authorization", &auth), ("Kep-OrgLoginType", "ID x")],
            400,
        ),
        (
            vec![("Authorization", "Secret wrong"), ("Kep-OrgLoginType", &id)],
            401,
        ),
        (
            vec![("Authorization", &auth), ("Kep-OrgLoginType", "ID 999")],
            401,
        ),
        (
            vec![("Authorization", &auth), ("Kep-OrgLoginType", &id)],
            200,
        ),
    ];
    for (headers, want) in cases {
        let (status, body, res_headers) = raw(&url, &headers, None).await;
        assert_eq!(status, want, "{headers:?}: {body}");
        assert_eq!(body["_code"], want, "{headers:?}");
        assert!(body["_message"].is_string());
        assert!(res_headers.contains_key("x-request-id"));
    }
    // X-Request-Id is echoed when the caller sends one.
    let (_, _, h) = raw(
        &url,
        &[
            ("Authorization", &auth),
            ("Kep-OrgLoginType", &id),
            ("X-Request-Id", "trace-42"),
        ],
        None,
    )
    .await;
    assert_eq!(h["x-request-id"], "trace-42");

    // uploadResult's own headers, then its body.
    let url = format!("{}/api/trust/drm/v0/uploadResult", srv.adapter_url);
    let base = [
        ("Authorization", auth.as_str()),
        ("Kep-OrgLoginType", id.as_str()),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        base.iter()
            .copied()
            .chain(extra.iter().copied())
            .collect::<Vec<_>>()
    };
    let body = r#"{"result":"SUCCESS","reason":"ok"}"#;
    for (headers, want) in [
        (with(&[("Kep-File-Id", "f"), ("Kep-File-Type", "DRM")]), 400),
        (
            with(&[
                ("Kep-AgentSession", "abc"),
                ("Kep-File-Id", "f"),
                ("Kep-File-Type", "DRM"),
            ]),
            400,
        ),
        (
            with(&[("Kep-AgentSession", "DSID abc"), ("Kep-File-Type", "DRM")]),
            400,
        ),
        (
            with(&[
                ("Kep-AgentSession", "DSID abc"),
                ("Kep-File-Id", "f"),
                ("Kep-File-Type", "ZIP"),
            ]),
            400,
        ),
        (
            with(&[("Kep-AgentSession", "DSID abc"), ("Kep-File-Id", "f")]),
            400,
        ),
        (
            with(&[
                ("Kep-AgentSession", "DSID abc"),
                ("Kep-File-Id", "f"),
                ("Kep-File-Type", "DRM"),
            ]),
            404,
        ),
    ] {
        let (status, answer, _) = raw(&url, &headers, Some(body)).await;
        assert_eq!(
            (status, answer["_code"].as_u64()),
            (want, Some(u64::from(want))),
            "{headers:?}: {answer}"
        );
    }
    let full = with(&[
        ("Kep-AgentSession", "DSID abc"),
        ("Kep-File-Id", "f"),
        ("Kep-File-Type", "DRM"),
    ]);
    for bad in ["{not json", r#"{"reason":"x"}"#, r#"{"result":"SUCCESS"}"#] {
        let (status, answer, _) = raw(&url, &full, Some(bad)).await;
        assert_eq!(
            (status, answer["_code"].as_u64()),
            (400, Some(400)),
            "{bad}"
        );
    }
    // Unknown paths and methods keep the shape too.
    let (status, answer, _) = raw(&format!("{}/api/trust/nope", srv.adapter_url), &[], None).await;
    assert_eq!((status, answer["_code"].as_u64()), (404, Some(404)));
    let (status, answer, _) = raw(
        &format!("{}/api/trust/drm/v0/uploadResult", srv.adapter_url),
        &[],
        None,
    )
    .await;
    assert_eq!((status, answer["_code"].as_u64()), (405, Some(405)));
}

#[tokio::test]
async fn upload_decrypted_refuses_bad_files_without_changing_the_session() {
    let srv = spawn(|s| s.max_file_bytes = 1024).await;
    let mut agent_srv = agent(0).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let agent = AgentClient::new(&srv.adapter_url, org.id, "Secret", &org.secret_key);
    let session = srv
        .admin
        .drm_request(&DrmRequest {
            org_login_type_id: org.id,
            file_id: "f".into(),
            file_type: FileType::Drm,
            user: None,
        })
        .await
        .unwrap()
        .session_id;
    next_notice(&mut agent_srv).await;
    agent
        .upload_result(&session, "f", FileType::Drm, &result("SUCCESS"))
        .await
        .unwrap();

    let e = agent
        .upload_decrypted(&session, "f", Part::bytes(Vec::new()))
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&e),
        (400, json!({"_code": 400, "_message": "the file is empty"}))
    );
    let e = agent
        .upload_decrypted(&session, "f", Part::bytes(vec![7u8; 1025]))
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 413, "one byte over the limit");

    // A multipart body without `file`, and a body that is not multipart.
    let url = format!("{}/api/trust/drm/v0/uploadDecrypted", srv.adapter_url);
    let headers = [
        ("Authorization", format!("Secret {}", org.secret_key)),
        ("Kep-OrgLoginType", format!("ID {}", org.id)),
        ("Kep-AgentSession", format!("DSID {session}")),
        ("Kep-File-Id", "f".to_owned()),
    ];
    let mut req = reqwest::Client::new().post(&url);
    for (k, v) in &headers {
        req = req.header(*k, v);
    }
    let res = req
        .multipart(reqwest::multipart::Form::new().text("other", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(res.json::<Value>().await.unwrap()["_code"], 400);
    let mut req = reqwest::Client::new().post(&url);
    for (k, v) in &headers {
        req = req.header(*k, v);
    }
    let res = req
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(res.json::<Value>().await.unwrap()["_code"], 400);
    assert_eq!(
        srv.admin.drm_session(&session).await.unwrap().status,
        SessionStatus::Granted,
        "unchanged"
    );

    // Exactly at the limit is fine.
    agent
        .upload_decrypted(&session, "f", Part::bytes(vec![7u8; 1024]))
        .await
        .unwrap();
    assert_eq!(
        srv.admin
            .drm_session(&session)
            .await
            .unwrap()
            .file
            .unwrap()
            .size,
        1024
    );
}

#[tokio::test]
async fn a_failing_agent_is_retried_and_every_attempt_is_recorded() {
    let srv = spawn(|s| s.notify_attempts = 4).await;
    let mut agent_srv = agent(2).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let ask = drm_file_f(org.id);
    let session = srv.admin.drm_request(&ask).await.unwrap().session_id;
    next_notice(&mut agent_srv).await;
    // The agent has the notice before the server has its 204: the last attempt is recorded
    // a moment later.
    let statuses: Vec<_> = srv
        .attempts(&session, 3)
        .await
        .iter()
        .map(|a| a.status)
        .collect();
    assert_eq!(statuses, [Some(500), Some(500), Some(204)]);

    // An agent that is down: every attempt fails, each recorded with its error.
    let down = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
    let session = srv
        .admin
        .drm_request(&DrmRequest {
            org_login_type_id: down.id,
            ..ask
        })
        .await
        .unwrap()
        .session_id;
    let attempts = srv.attempts(&session, 4).await;
    assert_eq!(attempts.len(), 4);
    assert!(
        attempts
            .iter()
            .all(|a| a.status.is_none() && a.error.is_some())
    );
    assert_eq!(
        srv.admin.drm_session(&session).await.unwrap().status,
        SessionStatus::Pending
    );
}

#[tokio::test]
async fn an_agent_address_that_redirects_is_not_followed() {
    let srv = spawn(|s| s.notify_attempts = 2).await;
    let mut agent_srv = agent(0).await;
    let redirecting = redirecting_to(format!("http://{}/drm/notify", agent_srv.host)).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&redirecting))
        .await
        .unwrap();
    let session = srv
        .admin
        .drm_request(&drm_file_f(org.id))
        .await
        .unwrap()
        .session_id;
    // The redirect is the answer, not a 2xx: each attempt fails on it, and the agent it
    // points to hears nothing.
    let statuses: Vec<_> = srv
        .attempts(&session, 2)
        .await
        .iter()
        .map(|a| a.status)
        .collect();
    assert_eq!(statuses, [Some(307), Some(307)]);
    assert!(agent_srv.notices.try_recv().is_err());
    assert_eq!(
        srv.admin.drm_session(&session).await.unwrap().status,
        SessionStatus::Pending
    );
}

#[tokio::test]
async fn sessions_expire() {
    let srv = spawn(|s| {
        s.session_ttl_s = 1;
        s.sweep_interval_s = 1;
    })
    .await;
    let mut agent_srv = agent(0).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let agent = AgentClient::new(&srv.adapter_url, org.id, "Secret", &org.secret_key);
    let ask = drm_file_f(org.id);
    let session = srv.admin.drm_request(&ask).await.unwrap().session_id;
    next_notice(&mut agent_srv).await;
    srv.clock.advance(Duration::from_millis(999));
    assert_eq!(
        srv.admin.drm_session(&session).await.unwrap().status,
        SessionStatus::Pending
    );
    // The ttl (1 s) has passed: a session past its expiry reads as expired at once, before
    // the sweeper marks it.
    srv.clock.advance(Duration::from_millis(1));
    assert_eq!(
        srv.admin.drm_session(&session).await.unwrap().status,
        SessionStatus::Expired
    );
    let e = agent
        .upload_result(&session, "f", FileType::Drm, &result("SUCCESS"))
        .await
        .unwrap_err();
    assert_eq!(
        api_status(&e),
        (
            409,
            json!({"_code": 409, "_message": "the session expired"})
        )
    );
}

#[tokio::test]
async fn a_notification_a_stop_cut_off_is_sent_after_the_restart() {
    // The first attempt fails, and the next would come only after a minute.
    let slow_retry = |s: &mut kep_adapter::AdapterSettings| {
        s.notify_attempts = 5;
        s.notify_backoff_ms = 60_000;
    };
    let srv = spawn(slow_retry).await;
    let mut agent_srv = agent(1).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&agent_srv.host))
        .await
        .unwrap();
    let ask = drm_file_f(org.id);
    let session = srv.admin.drm_request(&ask).await.unwrap().session_id;
    srv.attempts(&session, 1).await;

    let srv = srv.restart(|s| s.notify_attempts = 5).await;
    let (_, notice) = next_notice(&mut agent_srv).await;
    assert_eq!(notice.session_id, session);
    let statuses: Vec<_> = srv
        .attempts(&session, 2)
        .await
        .iter()
        .map(|a| (a.attempt, a.status))
        .collect();
    assert_eq!(
        statuses,
        [(1, Some(500)), (2, Some(204))],
        "counted on from before the stop"
    );
}

/// A release request for the DRM file `f` of the org.
fn drm_file_f(org_login_type_id: i64) -> DrmRequest {
    DrmRequest {
        org_login_type_id,
        file_id: "f".into(),
        file_type: FileType::Drm,
        user: None,
    }
}
