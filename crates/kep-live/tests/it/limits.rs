//! Rate and concurrency limits of room calls and joins.

use kep_client::live::{LiveClient, Participant};
use kep_testkit::Held;
use kep_testkit::limits::{self, Answer, Budgets, Limited, assert_limited};

use crate::common::{TestServer, rpc_code, spawn};

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

/// `Room.ListRooms` with `token`.
async fn list_rooms(
    srv: &TestServer,
    token: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> Answer {
    let mut req = reqwest::Client::new()
        .post(format!("{}/api/rpc", srv.live_url))
        .header("content-type", "application/json")
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    Answer::read(req.send().await.unwrap()).await
}

/// Room calls (`Room.ListRooms`) made with a service's admin token, or a wrong one.
struct RoomCalls<'a>(&'a TestServer);

impl Limited for RoomCalls<'_> {
    type Credential = String;

    async fn call(&self, token: &String) -> Answer {
        list_rooms(self.0, Some(token), LIST_ROOMS).await
    }

    fn hold(&self, token: &String) -> Held {
        let (head, rest) = LIST_ROOMS.split_at(LIST_ROOMS.len() / 2);
        let call = reqwest::Client::new()
            .post(format!("{}/api/rpc", self.0.live_url))
            .header("content-type", "application/json")
            .bearer_auth(token);
        kep_testkit::held(call, head.into(), rest.into())
    }

    /// A 429 in the JSON-RPC shape: error -32005 with its reason.
    fn limit_reason(answer: &Answer) -> String {
        let body = &answer.body;
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["error"]["code"], -32005, "{body}");
        assert_eq!(body["error"]["message"], "Limit exceeded");
        body["error"]["data"]["reason"].as_str().unwrap().to_owned()
    }

    fn assert_wrong_credential(answer: &Answer) {
        assert_eq!(answer.body["error"]["code"], -11002, "{}", answer.body);
    }

    fn passed(&self, answer: &Answer) -> bool {
        answer.status == 200 && answer.body["result"].is_array()
    }
}

#[tokio::test]
async fn room_calls_are_limited_per_service_and_a_wrong_token_spends_only_its_peers_budget() {
    // A burst of 4, then one call an hour: nothing refills while the test runs.
    let srv = spawn(|s| {
        s.limits.rate_limit_per_s = 1.0 / 3600.0;
        s.limits.rate_limit_burst = 4;
    })
    .await;
    // Provision has no token yet: its steps count against the caller's address.
    let a = admin_token(&srv, "a").await;
    let b = admin_token(&srv, "b").await;
    let calls = RoomCalls(&srv);
    limits::each_tenant_spends_its_own_budget(
        &calls,
        Budgets {
            wrong: &"not-a-token".to_owned(),
            wrong_left: 0,
            a: &a,
            a_left: 4,
            b: &b,
        },
    )
    .await;
    // A Provision from the spent address is refused too.
    let step1 = r#"{"jsonrpc":"2.0","id":"1","method":"Provision","params":{"serviceId":"a","scheme":"internal"}}"#;
    assert_limited::<RoomCalls>(&list_rooms(&srv, None, step1).await);
    // Nothing refills within the hour.
    let over = calls.call(&a).await;
    assert!(over.retry_after.unwrap() <= 3600);
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
    limits::a_spent_budget_refills(&RoomCalls(&srv), &a).await;
}

#[tokio::test]
async fn a_service_may_have_only_so_many_calls_in_flight() {
    let srv = spawn(|s| s.limits.concurrency_limit = 2).await;
    let a = admin_token(&srv, "a").await;
    let b = admin_token(&srv, "b").await;
    limits::only_so_many_calls_in_flight(&RoomCalls(&srv), 2, &a, Some(&b)).await;
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
