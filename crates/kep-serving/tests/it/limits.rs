//! Rate and concurrency limits of endpoint calls through the gateway.

use kep_testkit::Held;
use kep_testkit::limits::{self, Answer, Budgets, Limited};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;

/// Calls of an endpoint through the gateway, with its key or a wrong one: `GET /`, and
/// uploads held in flight. A call the limits let through is answered `passes`: a 503 while
/// the endpoint has no deployment, the instance's 200 once it has.
struct EndpointCalls<'a> {
    s: &'a Server,
    passes: StatusCode,
}

/// An endpoint and a key.
type Key = (&'static str, String);

impl Limited for EndpointCalls<'_> {
    type Credential = Key;

    async fn call(&self, (endpoint, key): &Key) -> Answer {
        Answer::read(self.s.gateway_get(endpoint, Some(key), "/").await).await
    }

    fn hold(&self, (endpoint, key): &Key) -> Held {
        let call = self
            .s
            .http
            .post(format!("{}/endpoints/{endpoint}/upload", self.s.gateway))
            .bearer_auth(key);
        kep_testkit::held(call, vec![1u8; 1000], vec![2u8; 1000])
    }

    /// A 429 in the gateway's shape: `too_many_requests`.
    fn limit_reason(answer: &Answer) -> String {
        let body = &answer.body;
        assert_eq!(body["error"]["code"], "too_many_requests", "{body}");
        body["error"]["message"].as_str().unwrap().to_owned()
    }

    fn assert_wrong_credential(answer: &Answer) {
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.body);
    }

    fn passed(&self, answer: &Answer) -> bool {
        answer.status == self.passes
    }
}

#[tokio::test]
async fn endpoint_calls_are_limited_per_endpoint_and_a_wrong_key_spends_only_its_peers_budget() {
    // A burst of 3, then one call an hour: nothing refills while the test runs.
    let s = spawn(|_, gateway| {
        gateway.limits.rate_limit_per_s = 1.0 / 3600.0;
        gateway.limits.rate_limit_burst = 3;
    })
    .await;
    // No deployments: a call the limits let through is a 503.
    let a = ("ea", s.endpoint("ea", 1).await);
    let b = ("eb", s.endpoint("eb", 1).await);
    let calls = EndpointCalls {
        s: &s,
        passes: StatusCode::SERVICE_UNAVAILABLE,
    };
    limits::each_tenant_spends_its_own_budget(
        &calls,
        Budgets {
            wrong: &("ea", "wrong".to_owned()),
            wrong_left: 3,
            a: &a,
            a_left: 3,
            b: &b,
        },
    )
    .await;
    // A wrong key for an endpoint that does not exist spends the same peer's budget.
    limits::assert_limited::<EndpointCalls>(&calls.call(&("nope", "wrong".to_owned())).await);
    s.service.stop().await;
}

#[tokio::test]
async fn an_endpoint_may_have_only_so_many_calls_in_flight() {
    let s = spawn(|_, gateway| gateway.limits.concurrency_limit = 1).await;
    s.image("echo").await;
    let key = ("held", s.endpoint("held", 1).await);
    s.deploy("held", custom("app", json!({}))).await;
    s.available("held", "app").await;
    let held = limits::only_so_many_calls_in_flight(
        &EndpointCalls {
            s: &s,
            passes: StatusCode::OK,
        },
        1,
        &key,
        None,
    )
    .await;
    for res in held {
        assert_eq!(res.json::<Value>().await.unwrap()["body_len"], 2000);
    }
    s.service.stop().await;
}

#[tokio::test]
async fn an_endpoints_spent_rate_refills() {
    let s = spawn(|_, gateway| {
        gateway.limits.rate_limit_per_s = 1.0;
        gateway.limits.rate_limit_burst = 2;
    })
    .await;
    let key = ("ea", s.endpoint("ea", 1).await);
    let calls = EndpointCalls {
        s: &s,
        passes: StatusCode::SERVICE_UNAVAILABLE,
    };
    limits::a_spent_budget_refills(&calls, &key).await;
    s.service.stop().await;
}
