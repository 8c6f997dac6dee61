//! Rate and concurrency limits of agent calls.

use kep_api::adapter::{DrmRequest, FileType};
use kep_client::adapter::AgentClient;
use kep_testkit::Held;
use kep_testkit::limits::{self, Answer, Budgets, Limited};

use crate::common::*;

/// An org login type's id and secret key, or a wrong key.
type Key = (String, String);

/// An agent's calls: `getOrgLoginType`, and uploads of `session` held in flight.
struct AgentCalls<'a> {
    srv: &'a Server,
    session: Option<String>,
}

/// `getOrgLoginType` with these credentials.
async fn org_login_type(srv: &Server, (id, secret): &Key) -> Answer {
    let res = reqwest::Client::new()
        .get(format!(
            "{}/api/trust/login/v0/getOrgLoginType",
            srv.adapter_url
        ))
        .header("Authorization", format!("Secret {secret}"))
        .header("Kep-OrgLoginType", format!("ID {id}"))
        .send()
        .await
        .unwrap();
    Answer::read(res).await
}

impl Limited for AgentCalls<'_> {
    type Credential = Key;

    async fn call(&self, key: &Key) -> Answer {
        org_login_type(self.srv, key).await
    }

    fn hold(&self, (id, secret): &Key) -> Held {
        let session = self.session.as_deref().expect("a session to upload to");
        let call = reqwest::Client::new()
            .post(format!(
                "{}/api/trust/drm/v0/uploadDecrypted",
                self.srv.adapter_url
            ))
            .header("Authorization", format!("Secret {secret}"))
            .header("Kep-OrgLoginType", format!("ID {id}"))
            .header("Kep-AgentSession", format!("DSID {session}"))
            .header("Kep-File-Id", "doc")
            .header("content-type", "multipart/form-data; boundary=held");
        let mut head =
            b"--held\r\ncontent-disposition: form-data; name=\"file\"; filename=\"doc\"\r\n\r\n"
                .to_vec();
        head.extend([7u8; 1000]);
        let mut rest = vec![7u8; 1000];
        rest.extend(b"\r\n--held--\r\n");
        kep_testkit::held(call, head, rest)
    }

    /// A 429 in the adapter's shape: `_code` 429 with the reason, and `X-Request-Id`.
    fn limit_reason(answer: &Answer) -> String {
        let body = &answer.body;
        assert_eq!(body["_code"], 429, "{body}");
        assert!(answer.headers.contains_key("x-request-id"));
        body["_message"].as_str().unwrap().to_owned()
    }

    fn assert_wrong_credential(answer: &Answer) {
        assert_eq!(answer.status, 401, "{}", answer.body);
    }
}

/// A new org login type's id and secret key.
async fn org(srv: &Server) -> Key {
    let org = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
    (org.id.to_string(), org.secret_key)
}

#[tokio::test]
async fn agent_calls_are_limited_per_org_and_a_wrong_key_spends_only_its_peers_budget() {
    // A burst of 3, then one call an hour: nothing refills while the test runs.
    let srv = spawn(|s| {
        s.limits.rate_limit_per_s = 1.0 / 3600.0;
        s.limits.rate_limit_burst = 3;
    })
    .await;
    let (a, b) = (org(&srv).await, org(&srv).await);
    let calls = AgentCalls {
        srv: &srv,
        session: None,
    };
    // A wrong key for org a counts against the caller's address.
    limits::each_tenant_spends_its_own_budget(
        &calls,
        Budgets {
            wrong: &(a.0.clone(), "wrong".to_owned()),
            wrong_left: 3,
            a: &a,
            a_left: 3,
            b: &b,
        },
    )
    .await;
    // So does a call without the headers, now over that budget.
    let url = format!("{}/api/trust/login/v0/getOrgLoginType", srv.adapter_url);
    let res = reqwest::Client::new().get(url).send().await.unwrap();
    limits::assert_limited::<AgentCalls>(&Answer::read(res).await);
}

#[tokio::test]
async fn an_org_may_have_only_so_many_calls_in_flight() {
    let srv = spawn(|s| s.limits.concurrency_limit = 1).await;
    let a = srv
        .admin
        .create_org(&oauth2_org("127.0.0.1:9"))
        .await
        .unwrap();
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
    let calls = AgentCalls {
        srv: &srv,
        session: Some(session),
    };
    limits::only_so_many_calls_in_flight(&calls, 1, &(a.id.to_string(), a.secret_key), None).await;
}

#[tokio::test]
async fn a_spent_rate_refills() {
    let srv = spawn(|s| {
        s.limits.rate_limit_per_s = 1.0;
        s.limits.rate_limit_burst = 3;
    })
    .await;
    let a = org(&srv).await;
    let calls = AgentCalls {
        srv: &srv,
        session: None,
    };
    limits::a_spent_budget_refills(&calls, &a).await;
}
