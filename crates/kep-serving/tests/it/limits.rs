//! Rate and concurrency limits of endpoint calls through the gateway.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::*;

/// `GET /endpoints/{endpoint}/` with `key`: (status, `Retry-After`, body).
async fn limited(s: &Server, endpoint: &str, key: &str) -> (StatusCode, Option<u64>, Value) {
    kep_client::limited_answer(s.gateway_get(endpoint, Some(key), "/").await).await
}

/// A 429 in the gateway's shape: `too_many_requests`, and `Retry-After`.
fn assert_limited((status, retry_after, body): &(StatusCode, Option<u64>, Value)) {
    assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "too_many_requests", "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    assert!(retry_after.is_some_and(|s| s >= 1), "{retry_after:?}");
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
    let a = s.endpoint("ea", 1).await;
    let b = s.endpoint("eb", 1).await;
    // A wrong key counts against the caller's address: 3 refusals, then 429.
    for _ in 0..3 {
        assert_eq!(limited(&s, "ea", "wrong").await.0, StatusCode::UNAUTHORIZED);
    }
    assert_limited(&limited(&s, "ea", "wrong").await);
    assert_limited(&limited(&s, "nope", "wrong").await);
    // Endpoint ea's budget is whole: 3 calls pass, the fourth is refused; eb is untouched.
    for _ in 0..3 {
        let (status, _, body) = limited(&s, "ea", &a).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    }
    assert_limited(&limited(&s, "ea", &a).await);
    assert_eq!(
        limited(&s, "eb", &b).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    s.service.stop().await;
}

/// A call of endpoint `held` whose body has not finished arriving, so it stays in flight
/// until released.
fn held_call(s: &Server, key: &str) -> kep_client::Held {
    let call = s
        .http
        .post(format!("{}/endpoints/held/upload", s.gateway))
        .bearer_auth(key);
    kep_client::held(call, vec![1u8; 1000], vec![2u8; 1000])
}

#[tokio::test]
async fn an_endpoint_may_have_only_so_many_calls_in_flight() {
    let s = spawn(|_, gateway| gateway.limits.concurrency_limit = 1).await;
    s.image("echo").await;
    let key = s.endpoint("held", 1).await;
    s.deploy("held", custom("app", json!({}))).await;
    s.available("held", "app").await;
    let (mut held, mut release) = held_call(&s, &key);
    // Once the gateway has it, another call of the endpoint is refused.
    let refused = eventually(
        Duration::from_secs(30),
        "a second call in flight is refused",
        async || {
            // A call that came first took the one slot, and the held one was refused: hold
            // another, and call once it has had the pause to reach the server.
            if held.is_finished() {
                (held, release) = held_call(&s, &key);
                return Err("the held call was refused; held another".to_owned());
            }
            match limited(&s, "held", &key).await {
                answer @ (StatusCode::TOO_MANY_REQUESTS, ..) => Ok(answer),
                (status, _, body) => Err(format!("{status} {body}")),
            }
        },
    )
    .await;
    assert_limited(&refused);
    assert!(
        refused.2["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in flight")
    );
    release.send(()).unwrap();
    let res = held.await.unwrap().unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.json::<Value>().await.unwrap()["body_len"], 2000);
    assert_eq!(limited(&s, "held", &key).await.0, StatusCode::OK);
    s.service.stop().await;
}

#[tokio::test]
async fn an_endpoints_spent_rate_refills() {
    let s = spawn(|_, gateway| {
        gateway.limits.rate_limit_per_s = 1.0;
        gateway.limits.rate_limit_burst = 2;
    })
    .await;
    let key = s.endpoint("ea", 1).await;
    let mut spent = false;
    for _ in 0..20 {
        let answer = limited(&s, "ea", &key).await;
        if answer.0 == StatusCode::TOO_MANY_REQUESTS {
            assert_limited(&answer);
            spent = true;
            break;
        }
    }
    assert!(spent, "20 calls at once spend a burst of 2");
    // No deployment: a call the limit lets through is the gateway's 503. A refused call spends
    // nothing, so asking often does not hold the refill back.
    eventually(
        Duration::from_secs(30),
        "the bucket refills",
        async || match limited(&s, "ea", &key).await {
            (StatusCode::SERVICE_UNAVAILABLE, ..) => Ok(()),
            (status, _, body) => Err(format!("{status} {body}")),
        },
    )
    .await;
    s.service.stop().await;
}
