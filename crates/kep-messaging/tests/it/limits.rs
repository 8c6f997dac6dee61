//! Rate and concurrency limits of message calls.

use kep_testkit::Held;
use kep_testkit::limits::{self, Answer, Budgets, Limited};
use reqwest::StatusCode;
use serde_json::Value;

use crate::common::*;

/// A call with `token` (any string) to `path`.
async fn limited_get(srv: &Server, token: &str, path: &str) -> Answer {
    let res = srv
        .http
        .get(format!("{}{path}", srv.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    Answer::read(res).await
}

const RESULTS: &str = "/v2/info/rcs/results";

/// A client's calls (the RCS results, and sends held in flight) with its token, or a wrong
/// one.
struct ClientCalls<'a>(&'a Server);

impl Limited for ClientCalls<'_> {
    type Credential = String;

    async fn call(&self, token: &String) -> Answer {
        limited_get(self.0, token, RESULTS).await
    }

    fn hold(&self, token: &String) -> Held {
        let mut head = sms("held", "821012345678").to_string().into_bytes();
        let rest = head.split_off(head.len() / 2);
        let send = self
            .0
            .http
            .post(format!("{}/v2/send/xms", self.0.url))
            .bearer_auth(token)
            .header("content-type", "application/json");
        kep_testkit::held(send, head, rest)
    }

    /// A 429 in the message API's shape: code `429`, `result.detail_code` `API_429`.
    fn limit_reason(answer: &Answer) -> String {
        let body = &answer.body;
        assert_eq!(body["code"], "429", "{body}");
        assert_eq!(body["result"]["detail_code"], "API_429", "{body}");
        body["result"]["detail_message"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn assert_wrong_credential(answer: &Answer) {
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.body);
    }
}

#[tokio::test]
async fn message_calls_are_limited_per_client_and_a_wrong_token_spends_only_its_peers_budget() {
    // A burst of 3, then one call an hour: nothing refills while the test runs.
    let srv = spawn_with(|s| {
        s.limits.rate_limit_per_s = 1.0 / 3600.0;
        s.limits.rate_limit_burst = 3;
    })
    .await;
    let (a_id, a_secret) = srv.client().await;
    let (b_id, b_secret) = srv.client().await;
    // The token calls count against the clients their credentials name: one of 3 each.
    let a = srv.token(&a_id, &a_secret).await;
    let b = srv.token(&b_id, &b_secret).await;
    limits::each_tenant_spends_its_own_budget(
        &ClientCalls(&srv),
        Budgets {
            wrong: &"not-a-token".to_owned(),
            wrong_left: 3,
            a: &a,
            a_left: 2,
            b: &b,
        },
    )
    .await;
    // The token endpoint answers a wrong secret from the spent address in its own shape.
    let res = srv
        .http
        .post(format!("{}/v2/oauth/token", srv.url))
        .basic_auth(&a_id, Some("wrong"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().contains_key("retry-after"));
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "temporarily_unavailable", "{body}");
    // The RCS detail refuses client a, over its budget, in its own HTTP-style shape.
    let answer = limited_get(&srv, &a, "/v2/info/rcs/search/detail/00000000000000000000").await;
    assert_eq!(
        answer.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        answer.body
    );
    assert_eq!(answer.body["code"], "429", "{}", answer.body);
    assert_eq!(
        answer.body["code_detail"]["detail_code"], "API_429",
        "{}",
        answer.body
    );
    assert!(answer.retry_after.is_some());
    // So does the token endpoint.
    let res = srv
        .http
        .post(format!("{}/v2/oauth/token", srv.url))
        .basic_auth(&a_id, Some(&a_secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_client_may_have_only_so_many_calls_in_flight() {
    let srv = spawn_with(|s| s.limits.concurrency_limit = 1).await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    limits::only_so_many_calls_in_flight(&ClientCalls(&srv), 1, &token, None).await;
}

#[tokio::test]
async fn a_clients_spent_rate_refills() {
    let srv = spawn_with(|s| {
        s.limits.rate_limit_per_s = 1.0;
        s.limits.rate_limit_burst = 2;
    })
    .await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    limits::a_spent_budget_refills(&ClientCalls(&srv), &token).await;
}
