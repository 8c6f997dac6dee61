//! Rate and concurrency limits of room calls and joins.

use std::time::Duration;

use kep_client::live::{LiveClient, Participant};
use serde_json::{Value, json};

use crate::common::{TestServer, eventually, rpc_code, spawn};

const LIST_ROOMS: &str = r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms","params":{}}"#;

/// A fresh service's admin token.
async fn admin_token(srv: &TestServer, id: &str) -> String {
    let secrets = srv.create_service(id).await;
    LiveClient::new(&srv.live_url)
        .provision(id, &secrets.admin_secret)
        .await
        .unwrap()
        .token
}

/// `Room.ListRooms` with `token`: (HTTP status, `Retry-After`, body).
async fn list_rooms(
    srv: &TestServer,
    token: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> (u16, Option<u64>, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}/api/rpc", srv.live_url))
        .header("content-type", "application/json")
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let res = req.send().await.unwrap();
    let retry_after = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (
        res.status().as_u16(),
        retry_after,
        res.json().await.unwrap(),
    )
}

/// A 429 in the JSON-RPC shape: error -32005 with its reason, and `Retry-After`.
fn assert_limited((status, retry_after, body): &(u16, Option<u64>, Value)) {
    assert_eq!(*status, 429, "{body}");
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["error"]["code"], -32005, "{body}");
    assert_eq!(body["error"]["message"], "Limit exceeded");
    assert!(body["error"]["data"]["reason"].is_string(), "{body}");
    assert!(retry_after.is_some_and(|s| s >= 1), "{retry_after:?}");
}

/// A `Room.ListRooms` of `token` whose body has not finished arriving, so it stays in
/// flight until released.
fn held_call(srv: &TestServer, token: &str) -> kep_client::Held {
    let (head, rest) = LIST_ROOMS.split_at(LIST_ROOMS.len() / 2);
    let call = reqwest::Client::new()
        .post(format!("{}/api/rpc", srv.live_url))
        .header("content-type", "application/json")
        .bearer_auth(token);
    kep_client::held(call, head.into(), rest.into())
}

#[tokio::test]
async fn room_calls_are_limited_per_service_and_a_wrong_token_spends_only_its_peers_budget() {
    // A burst of 4, then one call an hour: nothing refills while the test runs.
    let srv = spawn(|s| {
        s.limits.rate_limit_per_s = 1.0 / 3600.0;
        s.limits.rate_limit_burst = 4;
    })
    .await;
    // Provision has no token yet: it counts against the caller's address.
    let a = admin_token(&srv, "a").await;
    let b = admin_token(&srv, "b").await;
    // Wrong tokens, from the same address, until its budget is spent.
    let mut refused = None;
    for _ in 0..5 {
        let answer = list_rooms(&srv, Some("not-a-token"), LIST_ROOMS).await;
        if answer.0 == 429 {
            refused = Some(answer);
            break;
        }
        assert_eq!(answer.2["error"]["code"], -11002, "{}", answer.2);
    }
    let refused = refused.expect("the peer's budget runs out");
    assert_limited(&refused);
    // A Provision from the spent address is refused too.
    let step1 = r#"{"jsonrpc":"2.0","id":"1","method":"Provision","params":{"serviceId":"a","scheme":"internal"}}"#;
    assert_limited(&list_rooms(&srv, None, step1).await);

    // Service a's own budget is whole: 4 calls pass, the fifth is refused.
    for i in 0..4 {
        let (status, _, body) = list_rooms(&srv, Some(&a), LIST_ROOMS).await;
        assert_eq!(status, 200, "call {i}: {body}");
        assert_eq!(body["result"], json!([]));
    }
    let over = list_rooms(&srv, Some(&a), LIST_ROOMS).await;
    assert_limited(&over);
    assert!(over.1.unwrap() <= 3600);
    // Service b is not touched by a's calls.
    let (status, _, body) = list_rooms(&srv, Some(&b), LIST_ROOMS).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_spent_budget_refills() {
    // Two calls at once (a Provision's two steps), then one a second.
    let srv = spawn(|s| {
        s.limits.rate_limit_per_s = 1.0;
        s.limits.rate_limit_burst = 2;
    })
    .await;
    let a = admin_token(&srv, "a").await;
    let mut spent = false;
    for _ in 0..20 {
        let answer = list_rooms(&srv, Some(&a), LIST_ROOMS).await;
        if answer.0 == 429 {
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
        async || match list_rooms(&srv, Some(&a), LIST_ROOMS).await {
            (200, ..) => Ok(()),
            (status, _, body) => Err(format!("{status} {body}")),
        },
    )
    .await;
}

#[tokio::test]
async fn a_service_may_have_only_so_many_calls_in_flight() {
    let srv = spawn(|s| s.limits.concurrency_limit = 2).await;
    let a = admin_token(&srv, "a").await;
    let b = admin_token(&srv, "b").await;
    // Two calls whose bodies have not finished arriving are in flight.
    let mut held = vec![held_call(&srv, &a), held_call(&srv, &a)];
    // Once the server has them both, a third call of a is refused; b's pass.
    let refused = eventually(
        Duration::from_secs(30),
        "a third call in flight is refused",
        async || {
            // A call that came first took a slot, and a held one was refused: hold another,
            // and call once it has had the pause to reach the server.
            let mut again = false;
            for h in &mut held {
                if h.0.is_finished() {
                    *h = held_call(&srv, &a);
                    again = true;
                }
            }
            if again {
                return Err("a held call was refused; held another".to_owned());
            }
            match list_rooms(&srv, Some(&a), LIST_ROOMS).await {
                answer @ (429, ..) => Ok(answer),
                (status, _, body) => Err(format!("{status} {body}")),
            }
        },
    )
    .await;
    assert_limited(&refused);
    assert_eq!(refused.1, Some(1));
    assert_eq!(list_rooms(&srv, Some(&b), LIST_ROOMS).await.0, 200);
    for (call, release) in held {
        release.send(()).unwrap();
        assert_eq!(call.await.unwrap().unwrap().status(), 200);
    }
    assert_eq!(list_rooms(&srv, Some(&a), LIST_ROOMS).await.0, 200);
}

#[tokio::test]
async fn joins_are_limited_per_service_and_failed_ones_per_peer() {
    let srv = spawn(|s| {
        s.limits.rate_limit_per_s = 1.0 / 3600.0;
        s.limits.rate_limit_burst = 3;
    })
    .await;
    let s = srv.create_service("s").await;
    let t = srv.create_service("t").await;
    let mut joined = Vec::new();
    for i in 0..3 {
        joined.push(srv.join(&s, "room", &format!("p{i}")).await);
    }
    let over = Participant::join(&srv.live_url, "s", &s.service_secret, "room", Some("p3"))
        .await
        .err()
        .unwrap();
    assert_eq!(rpc_code(&over), -32005, "{over}");
    // Joins with a wrong secret count against the address they come from.
    let mut codes = Vec::new();
    for _ in 0..4 {
        let e = Participant::join(&srv.live_url, "t", "wrong", "room", None)
            .await
            .err()
            .unwrap();
        codes.push(rpc_code(&e));
    }
    assert_eq!(codes, [-11002, -11002, -11002, -32005]);
    // Service t's budget is whole.
    for i in 0..3 {
        joined.push(srv.join(&t, "room", &format!("q{i}")).await);
    }
}
