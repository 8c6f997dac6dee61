//! The adapter API end to end: a real server on port 0, and a real agent (an HTTP server on
//! port 0) that receives the notification and answers with the adapter calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use kep_adapter::{AdapterService, AdapterSettings};
use kep_api::adapter::{
    AgentNotification, DataModel, DrmRequest, FileType, LoginModel, OAuth2Login,
    OrgLoginTypeRequest, SessionStatus, Synchronization, UploadResult, UserModel,
};
use kep_client::adapter::AgentClient;
use kep_client::{AdminClient, ClientError};
use kep_core::limits::Limits;
use kep_core::platform::Platform;
use reqwest::multipart::Part;
use serde_json::{Value, json};
use tokio::sync::mpsc;

const OPERATOR_TOKEN: &str = "test-operator-token";

struct Server {
    adapter_url: String,
    admin: AdminClient,
    _dir: tempfile::TempDir,
}

async fn spawn(configure: impl FnOnce(&mut AdapterSettings)) -> Server {
    let mut settings = AdapterSettings {
        addr: "127.0.0.1:0".parse().unwrap(),
        notify_backoff_ms: 50,
        ..AdapterSettings::default()
    };
    configure(&mut settings);
    let dir = tempfile::tempdir().unwrap();
    let mut platform = Platform::new(dir.path(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    platform.start::<AdapterService>(settings).await.unwrap();
    let running = platform.serve(OPERATOR_TOKEN, Limits::default());
    Server {
        adapter_url: running.url("adapter"),
        admin: AdminClient::new(running.url("admin"), OPERATOR_TOKEN),
        _dir: dir,
    }
}

/// A test agent: records each notification; answers 500 to the first `failures` of them.
struct Agent {
    host: String,
    notices: mpsc::UnboundedReceiver<(HeaderMap, AgentNotification)>,
}

async fn agent(failures: usize) -> Agent {
    let (tx, notices) = mpsc::unbounded_channel();
    let seen = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/drm/notify",
        axum::routing::post(
            move |headers: HeaderMap, axum::Json(n): axum::Json<AgentNotification>| {
                let tx = tx.clone();
                let seen = seen.clone();
                async move {
                    if seen.fetch_add(1, Ordering::SeqCst) < failures {
                        return StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    tx.send((headers, n)).unwrap();
                    StatusCode::NO_CONTENT
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Agent { host, notices }
}

fn oauth2_org(agent_host: &str) -> OrgLoginTypeRequest {
    OrgLoginTypeRequest {
        method: "OAUTH2".into(),
        adapter_agent: agent_host.into(),
        data_model: Some(DataModel {
            user: Some(UserModel {
                synchronization: Some(Synchronization {
                    options: Some(vec!["name".into(), "email".into()]),
                    active_options: None,
                }),
            }),
            login: Some(LoginModel {
                oauth2: Some(OAuth2Login {
                    authorization_endpoint: "https://idp.example/authorize".into(),
                    token_endpoint: "https://idp.example/token".into(),
                    response_type: "code".into(),
                    client_id: "kep".into(),
                    client_secret: "s3cret".into(),
                    scopes: vec!["openid".into(), "profile".into()],
                }),
                saml2: None,
            }),
        }),
    }
}

fn api_status(e: &ClientError) -> (u16, Value) {
    match e {
        ClientError::Api { status, body } => {
            (*status, serde_json::from_str(body).unwrap_or(Value::Null))
        }
        other => panic!("expected an HTTP error, got {other}"),
    }
}

async fn next_notice(agent: &mut Agent) -> (HeaderMap, AgentNotification) {
    tokio::time::timeout(Duration::from_secs(10), agent.notices.recv())
        .await
        .expect("a notification")
        .unwrap()
}

fn result(result: &str) -> UploadResult {
    UploadResult {
        result: result.into(),
        reason: "policy".into(),
        extra: Some(json!({"client_ip": "10.0.0.1", "agent": "test"})),
    }
}

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
    agent
        .upload_result(&plain, "plain-1", FileType::Plain, &result("FAILURE"))
        .await
        .unwrap();
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

/// Raw calls to check each header rule.
async fn raw(url: &str, headers: &[(&str, &str)], body: Option<&str>) -> (u16, Value, HeaderMap) {
    let mut req = reqwest::Client::new().post(url);
    if body.is_none() {
        req = reqwest::Client::new().get(url);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_owned());
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, res.json().await.unwrap_or(Value::Null), headers)
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
    let ask = DrmRequest {
        org_login_type_id: org.id,
        file_id: "f".into(),
        file_type: FileType::Drm,
        user: None,
    };
    let session = srv.admin.drm_request(&ask).await.unwrap().session_id;
    next_notice(&mut agent_srv).await;
    // The agent has the notice before the server has its 204: the last attempt is recorded
    // a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let statuses = loop {
        let attempts = srv.admin.drm_session(&session).await.unwrap().notifications;
        let statuses: Vec<_> = attempts.iter().map(|a| a.status).collect();
        if statuses.len() == 3 || std::time::Instant::now() > deadline {
            break statuses;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
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
    let mut attempts = Vec::new();
    for _ in 0..100 {
        attempts = srv.admin.drm_session(&session).await.unwrap().notifications;
        if attempts.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    let ask = DrmRequest {
        org_login_type_id: org.id,
        file_id: "f".into(),
        file_type: FileType::Drm,
        user: None,
    };
    let session = srv.admin.drm_request(&ask).await.unwrap().session_id;
    next_notice(&mut agent_srv).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
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
async fn the_operator_manages_org_login_types() {
    let srv = spawn(|_| {}).await;
    // Field rules of the document's tables, each naming its field.
    let base = serde_json::to_value(oauth2_org("agent:9000")).unwrap();
    let admin_url = srv.admin.base_url().to_owned();
    let post = |body: Value| {
        let url = format!("{admin_url}/admin/v1/adapter/org-login-types");
        async move {
            let res = reqwest::Client::new()
                .post(url)
                .bearer_auth(OPERATOR_TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap();
            (res.status().as_u16(), res.json::<Value>().await.unwrap())
        }
    };
    let mut cases = Vec::new();
    let mut b = base.clone();
    b["method"] = json!("LDAP");
    cases.push((b, "method"));
    let mut b = base.clone();
    b.as_object_mut().unwrap().remove("adapter_agent");
    cases.push((b, "adapter_agent"));
    let mut b = base.clone();
    b["data_model"]["login"]["oauth2"]
        .as_object_mut()
        .unwrap()
        .remove("client_id");
    cases.push((b, "data_model.login.oauth2.client_id"));
    let mut b = base.clone();
    b["data_model"]["login"]["oauth2"]["scopes"] = json!("openid");
    cases.push((b, "data_model.login.oauth2.scopes"));
    let mut b = base.clone();
    b["data_model"]["login"]["oauth2"]["token_endpoint"] = json!("");
    cases.push((b, "data_model.login.oauth2.token_endpoint"));
    let saml = |fetching: &str| {
        json!({"method": "SAML2", "adapter_agent": "agent", "data_model": {"login": {"saml2": {
            "registration_id": "idp", "entity_id": "kep", "saml_metadata_fetching_type": fetching, "sso_service_binding": "POST"}}}})
    };
    cases.push((
        saml("FROM_NOWHERE"),
        "data_model.login.saml2.saml_metadata_fetching_type",
    ));
    cases.push((
        saml("FROM_METADATA_LOCATION"),
        "data_model.login.saml2.metadata_location",
    ));
    let mut b = saml("FROM_DATABASE");
    b["data_model"]["login"]["saml2"]["want_authn_request_signed"] = json!("yes");
    cases.push((b, "data_model.login.saml2.want_authn_request_signed"));
    let mut b = base.clone();
    b["data_model"]["user"]["synchronization"]["active_options"] = json!(["other"]);
    cases.push((b, "data_model.user.synchronization"));
    for (body, field) in cases {
        let (status, answer) = post(body.clone()).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
    let (status, created) = post(saml("FROM_DATABASE")).await;
    assert_eq!(status, 201);
    let id = created["id"].as_i64().unwrap();

    // Read, update, rotate, delete.
    let org = srv.admin.org(id).await.unwrap();
    assert_eq!(org.method, "SAML2");
    let updated = srv
        .admin
        .update_org(id, &oauth2_org("agent2:9000"))
        .await
        .unwrap();
    assert_eq!(
        (updated.method.as_str(), updated.adapter_agent.as_str()),
        ("OAUTH2", "agent2:9000")
    );
    let old_key = created["secret_key"].as_str().unwrap();
    let new = srv.admin.rotate_org_key(id).await.unwrap();
    let e = AgentClient::new(&srv.adapter_url, id, "Secret", old_key)
        .get_org_login_type()
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 401, "the old key stops working");
    AgentClient::new(&srv.adapter_url, id, "Secret", &new.secret_key)
        .get_org_login_type()
        .await
        .unwrap();
    srv.admin.delete_org(id).await.unwrap();
    assert_eq!(api_status(&srv.admin.org(id).await.unwrap_err()).0, 404);
    assert_eq!(
        api_status(&srv.admin.delete_org(id).await.unwrap_err()).0,
        404
    );

    // A DRM request for an unknown org, or with a bad file type.
    let e = srv
        .admin
        .drm_request(&DrmRequest {
            org_login_type_id: id,
            file_id: "f".into(),
            file_type: FileType::Drm,
            user: None,
        })
        .await
        .unwrap_err();
    assert_eq!(api_status(&e).0, 404);
    let res = reqwest::Client::new()
        .post(format!("{admin_url}/admin/v1/adapter/drm-requests"))
        .bearer_auth(OPERATOR_TOKEN)
        .json(&json!({"org_login_type_id": 1, "file_id": "f", "file_type": "ZIP"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(
        res.json::<Value>().await.unwrap()["error"]["field"],
        "file_type"
    );
}

/// An operator call: its status and JSON answer.
async fn operator_call(
    srv: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", srv.admin.base_url()))
        .bearer_auth(OPERATOR_TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json::<Value>().await.unwrap())
}

/// Found by schema fuzzing (fuzz/schema.sh): a nested object sent as an array
/// (`"synchronization": [null, null]`) was read field by field and saved, and an integer sent
/// as `1.0` was refused although its schema (JSON Schema) counts it an integer.
#[tokio::test]
async fn operator_bodies_are_read_as_their_schema_reads_them() {
    let srv = spawn(|_| {}).await;
    let org = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
    let path = format!("/admin/v1/adapter/org-login-types/{}", org.id);
    let mut body = serde_json::to_value(oauth2_org("127.0.0.1:9")).unwrap();
    body["data_model"]["user"]["synchronization"] = json!([null, null]);
    let (status, answer) = operator_call(&srv, reqwest::Method::PUT, &path, Some(body)).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["field"], "data_model.user.synchronization");
    let kept = srv.admin.org(org.id).await.unwrap();
    assert_eq!(
        serde_json::to_value(kept.data_model).unwrap()["user"]["synchronization"]["options"],
        json!(["name", "email"]),
        "nothing was saved"
    );

    let drm = json!({"org_login_type_id": org.id as f64, "file_id": "f", "file_type": "DRM"});
    let (status, answer) = operator_call(
        &srv,
        reqwest::Method::POST,
        "/admin/v1/adapter/drm-requests",
        Some(drm),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
}

/// Found by schema fuzzing (fuzz/schema.sh): an org id out of the integers' range was
/// answered as plain text, not in the operator API's error shape.
#[tokio::test]
async fn an_org_id_that_does_not_parse_is_a_400_in_the_operator_shape() {
    let srv = spawn(|_| {}).await;
    for path in [
        "/admin/v1/adapter/org-login-types/9223372036854775808",
        "/admin/v1/adapter/org-login-types/x",
    ] {
        let (status, answer) = operator_call(&srv, reqwest::Method::GET, path, None).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some("invalid_path")),
            "{path}: {answer}"
        );
    }
}

/// Found while describing the rule for schema fuzzing: a DRM request took a file id its agent
/// could never name back in `Kep-File-Id` (read as visible ASCII, and trimmed): with `é.pdf`
/// or ` f` every uploadResult of the session was a 400 or a 404.
#[tokio::test]
async fn a_file_id_is_one_a_header_can_carry() {
    let srv = spawn(|_| {}).await;
    let mut agent = agent(0).await;
    let org = srv
        .admin
        .create_org(&oauth2_org(&agent.host))
        .await
        .unwrap();
    let drm = |file_id: &str| {
        Some(json!({"org_login_type_id": org.id, "file_id": file_id, "file_type": "DRM"}))
    };
    let url = "/admin/v1/adapter/drm-requests";
    for bad in ["é.pdf", " f", "f ", "f\tg", "", &"f".repeat(1025)] {
        let (status, answer) = operator_call(&srv, reqwest::Method::POST, url, drm(bad)).await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (400, Some("file_id")),
            "{bad:?}"
        );
    }
    let good = format!("a b~{}", "f".repeat(1020));
    let (status, answer) = operator_call(&srv, reqwest::Method::POST, url, drm(&good)).await;
    assert_eq!(status, 201, "{answer}");
    let (headers, notice) = next_notice(&mut agent).await;
    assert_eq!(notice.file_id, good);
    assert_eq!(headers["kep-file-id"], good.as_str());
}

// ---- Limits ----

/// `getOrgLoginType` with these credentials: (status, body, headers).
async fn org_login_type(srv: &Server, id: &str, secret: &str) -> (u16, Value, HeaderMap) {
    let url = format!("{}/api/trust/login/v0/getOrgLoginType", srv.adapter_url);
    let auth = format!("Secret {secret}");
    let id = format!("ID {id}");
    raw(
        &url,
        &[("Authorization", &auth), ("Kep-OrgLoginType", &id)],
        None,
    )
    .await
}

/// A 429 in the adapter's shape: `_code` 429 with the reason, `Retry-After`, `X-Request-Id`.
fn assert_limited((status, body, headers): &(u16, Value, HeaderMap)) {
    assert_eq!(*status, 429, "{body}");
    assert_eq!(body["_code"], 429, "{body}");
    assert!(body["_message"].is_string(), "{body}");
    let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    assert!(headers.contains_key("x-request-id"));
}

#[tokio::test]
async fn agent_calls_are_limited_per_org_and_a_wrong_key_spends_only_its_peers_budget() {
    // A burst of 3, then one call an hour: nothing refills while the test runs.
    let srv = spawn(|s| {
        s.limits.rate_limit_per_s = 1.0 / 3600.0;
        s.limits.rate_limit_burst = 3;
    })
    .await;
    let a = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
    let b = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
    let (a_id, b_id) = (a.id.to_string(), b.id.to_string());
    // A wrong key for org a counts against the caller's address: 3 refusals, then 429.
    for _ in 0..3 {
        assert_eq!(org_login_type(&srv, &a_id, "wrong").await.0, 401);
    }
    assert_limited(&org_login_type(&srv, &a_id, "wrong").await);
    // So does a call without the headers, now over that budget.
    let url = format!("{}/api/trust/login/v0/getOrgLoginType", srv.adapter_url);
    assert_limited(&raw(&url, &[], None).await);

    // Org a's budget is whole: 3 calls pass, the fourth is refused; org b is untouched.
    for _ in 0..3 {
        let (status, body, _) = org_login_type(&srv, &a_id, &a.secret_key).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_limited(&org_login_type(&srv, &a_id, &a.secret_key).await);
    assert_eq!(org_login_type(&srv, &b_id, &b.secret_key).await.0, 200);
}

/// An uploadDecrypted of `org`'s `session` whose file has not finished arriving, so the
/// call stays in flight, streaming to storage, until released.
fn held_upload(
    srv: &Server,
    org: &kep_api::adapter::OrgLoginTypeSecret,
    session: &str,
) -> kep_client::Held {
    let call = reqwest::Client::new()
        .post(format!(
            "{}/api/trust/drm/v0/uploadDecrypted",
            srv.adapter_url
        ))
        .header("Authorization", format!("Secret {}", org.secret_key))
        .header("Kep-OrgLoginType", format!("ID {}", org.id))
        .header("Kep-AgentSession", format!("DSID {session}"))
        .header("Kep-File-Id", "doc")
        .header("content-type", "multipart/form-data; boundary=held");
    let mut head =
        b"--held\r\ncontent-disposition: form-data; name=\"file\"; filename=\"doc\"\r\n\r\n"
            .to_vec();
    head.extend([7u8; 1000]);
    let mut rest = vec![7u8; 1000];
    rest.extend(b"\r\n--held--\r\n");
    kep_client::held(call, head, rest)
}

#[tokio::test]
async fn an_org_may_have_only_so_many_calls_in_flight() {
    let srv = spawn(|s| s.limits.concurrency_limit = 1).await;
    let a = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
    let a_id = a.id.to_string();
    let session = srv
        .admin
        .drm_request(&DrmRequest {
            org_login_type_id: a.id,
            file_id: "doc".into(),
            file_type: FileType::Drm,
            user: None,
        })
        .await
        .unwrap()
        .session_id;
    AgentClient::new(&srv.adapter_url, a.id, "Secret", &a.secret_key)
        .upload_result(&session, "doc", FileType::Drm, &result("SUCCESS"))
        .await
        .unwrap();
    let (mut held, mut release) = held_upload(&srv, &a, &session);
    // Once the server streams it, another call of org a is refused.
    let mut refused = None;
    for _ in 0..600 {
        // A call that came first took the one slot, and the upload was refused: hold another.
        if held.is_finished() {
            (held, release) = held_upload(&srv, &a, &session);
        }
        let answer = org_login_type(&srv, &a_id, &a.secret_key).await;
        if answer.0 == 429 {
            refused = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = refused.expect("a second call in flight is refused");
    assert_limited(&refused);
    assert!(
        refused.1["_message"]
            .as_str()
            .unwrap()
            .contains("in flight")
    );
    release.send(()).unwrap();
    assert_eq!(held.await.unwrap().unwrap().status(), 200);
    assert_eq!(org_login_type(&srv, &a_id, &a.secret_key).await.0, 200);
}

#[tokio::test]
async fn a_spent_rate_refills() {
    let srv = spawn(|s| {
        s.limits.rate_limit_per_s = 1.0;
        s.limits.rate_limit_burst = 3;
    })
    .await;
    let a = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
    let a_id = a.id.to_string();
    // Calls at once spend the burst; waiting refills it.
    let mut spent = false;
    for _ in 0..20 {
        let answer = org_login_type(&srv, &a_id, &a.secret_key).await;
        if answer.0 == 429 {
            spent = true;
            break;
        }
    }
    assert!(spent, "20 calls at once spend a burst of 3");
    let mut refilled = false;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if org_login_type(&srv, &a_id, &a.secret_key).await.0 == 200 {
            refilled = true;
            break;
        }
    }
    assert!(refilled, "the bucket refills");
}
