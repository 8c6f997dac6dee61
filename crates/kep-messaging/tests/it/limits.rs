//! Rate and concurrency limits of message calls.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use crate::common::*;

/// A call with `token` (any string) to `path`: (status, `Retry-After`, body).
async fn limited_get(srv: &Server, token: &str, path: &str) -> (StatusCode, Option<u64>, Value) {
    let res = srv
        .http
        .get(format!("{}{path}", srv.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    kep_client::limited_answer(res).await
}

/// A 429 in the message API's shape: code `429`, `result.detail_code` `API_429`, and
/// `Retry-After`.
fn assert_limited((status, retry_after, body): &(StatusCode, Option<u64>, Value)) {
    assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], "429", "{body}");
    assert_eq!(body["result"]["detail_code"], "API_429", "{body}");
    assert!(body["result"]["detail_message"].is_string(), "{body}");
    assert!(retry_after.is_some_and(|s| s >= 1), "{retry_after:?}");
}

const RESULTS: &str = "/v2/info/rcs/results";

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
    // A wrong token counts against the caller's address: 3 refusals, then 429.
    for _ in 0..3 {
        let (status, _, _) = limited_get(&srv, "not-a-token", RESULTS).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_limited(&limited_get(&srv, "not-a-token", RESULTS).await);
    // The token endpoint answers a wrong secret from that address in its own shape.
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

    // Client a's budget is whole: with its token call, 3 calls pass; the fourth is refused.
    for _ in 0..2 {
        let (status, _, body) = limited_get(&srv, &a, RESULTS).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert_limited(&limited_get(&srv, &a, RESULTS).await);
    // The RCS detail refuses in its own HTTP-style shape.
    let (status, retry_after, body) =
        limited_get(&srv, &a, "/v2/info/rcs/search/detail/00000000000000000000").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], "429", "{body}");
    assert_eq!(body["code_detail"]["detail_code"], "API_429", "{body}");
    assert!(retry_after.is_some());
    // So does the token endpoint, for a client over its budget.
    let res = srv
        .http
        .post(format!("{}/v2/oauth/token", srv.url))
        .basic_auth(&a_id, Some(&a_secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // Client b is untouched.
    let (status, _, body) = limited_get(&srv, &b, RESULTS).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A send whose body has not finished arriving, so it stays in flight until released.
fn held_send(srv: &Server, token: &str) -> kep_client::Held {
    let mut head = sms("held", "821012345678").to_string().into_bytes();
    let rest = head.split_off(head.len() / 2);
    let send = srv
        .http
        .post(format!("{}/v2/send/xms", srv.url))
        .bearer_auth(token)
        .header("content-type", "application/json");
    kep_client::held(send, head, rest)
}

#[tokio::test]
async fn a_client_may_have_only_so_many_calls_in_flight() {
    let srv = spawn_with(|s| s.limits.concurrency_limit = 1).await;
    let (id, secret) = srv.client().await;
    let token = srv.token(&id, &secret).await;
    let (mut held, mut release) = held_send(&srv, &token);
    // Once the server has the held send, another call of the client is refused.
    let refused = eventually(
        Duration::from_secs(30),
        "a second call in flight is refused",
        async || {
            // A call that came first took the one slot, and the send was refused: hold another,
            // and call once it has had the pause to reach the server.
            if held.is_finished() {
                (held, release) = held_send(&srv, &token);
                return Err("the held send was refused; held another".to_owned());
            }
            match limited_get(&srv, &token, RESULTS).await {
                answer @ (StatusCode::TOO_MANY_REQUESTS, ..) => Ok(answer),
                (status, _, body) => Err(format!("{status} {body}")),
            }
        },
    )
    .await;
    assert_limited(&refused);
    assert!(
        refused.2["result"]["detail_message"]
            .as_str()
            .unwrap()
            .contains("in flight")
    );
    release.send(()).unwrap();
    let sent = held.await.unwrap().unwrap();
    assert_eq!(sent.status(), StatusCode::OK);
    assert_eq!(limited_get(&srv, &token, RESULTS).await.0, StatusCode::OK);
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
    let mut spent = false;
    for _ in 0..20 {
        let answer = limited_get(&srv, &token, RESULTS).await;
        if answer.0 == StatusCode::TOO_MANY_REQUESTS {
            assert_limited(&answer);
            spent = true;
            break;
        }
    }
    assert!(spent, "20 calls at once spend a burst of 2");
    // A refused call spends nothing, so asking often does not hold the refill back.
    eventually(
        Duration::from_secs(30),
        "the bucket refills",
        async || match limited_get(&srv, &token, RESULTS).await {
            (StatusCode::OK, ..) => Ok(()),
            (status, _, body) => Err(format!("{status} {body}")),
        },
    )
    .await;
}
