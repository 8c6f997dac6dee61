//! Rate and concurrency limits of agent calls.

use std::time::Duration;

use axum::http::HeaderMap;
use kep_api::adapter::{DrmRequest, FileType};
use kep_client::adapter::AgentClient;
use serde_json::Value;

use crate::common::*;

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
    let refused = eventually(
        Duration::from_secs(30),
        "a second call in flight is refused",
        async || {
            // A call that came first took the one slot, and the upload was refused: hold
            // another, and call once it has had the pause to reach the server.
            if held.is_finished() {
                (held, release) = held_upload(&srv, &a, &session);
                return Err("the held upload was refused; held another".to_owned());
            }
            match org_login_type(&srv, &a_id, &a.secret_key).await {
                answer @ (429, ..) => Ok(answer),
                (status, body, _) => Err(format!("{status} {body}")),
            }
        },
    )
    .await;
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
    // A refused call spends nothing, so asking often does not hold the refill back.
    eventually(
        Duration::from_secs(30),
        "the bucket refills",
        async || match org_login_type(&srv, &a_id, &a.secret_key).await {
            (200, ..) => Ok(()),
            (status, body, _) => Err(format!("{status} {body}")),
        },
    )
    .await;
}
