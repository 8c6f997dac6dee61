//! Server webhooks (CONTRACT §1) against a receiver in the test: every delivery's signature
//! checked, each room's events in order, a participant's `left` after its `joined`, and
//! the receiver's failures (down, slow, redirecting, gone) met as the contract says.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use hmac::{Hmac, Mac};
use kep_client::ClientError;
use serde_json::Value;
use sha2::Sha256;

use crate::common::*;

/// How the receiver answers.
#[derive(Clone, Copy, PartialEq)]
enum Answer {
    Ok,
    Unavailable,
    Gone,
    Slow,
    Redirect,
}

#[derive(Clone)]
struct Receiver {
    url: String,
    answer: Arc<Mutex<Answer>>,
    /// Each delivery taken (answered 2xx), with whether its signature held.
    taken: Arc<Mutex<Vec<(Value, bool)>>>,
    /// Every request, whatever the answer.
    tries: Arc<Mutex<usize>>,
    secret: Arc<Mutex<String>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver = Receiver {
            url: format!("http://{}/hook", listener.local_addr().unwrap()),
            answer: Arc::new(Mutex::new(Answer::Ok)),
            taken: Arc::default(),
            tries: Arc::default(),
            secret: Arc::default(),
        };
        let r = receiver.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let r = r.clone();
                async move { r.take(&headers, body).await }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        receiver
    }

    async fn take(&self, headers: &HeaderMap, body: String) -> axum::response::Response {
        *self.tries.lock().unwrap() += 1;
        let answer = *self.answer.lock().unwrap();
        match answer {
            Answer::Unavailable => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
            Answer::Gone => return StatusCode::GONE.into_response(),
            Answer::Redirect => {
                return (StatusCode::TEMPORARY_REDIRECT, [("location", "/elsewhere")])
                    .into_response();
            }
            Answer::Slow => tokio::time::sleep(Duration::from_secs(2)).await,
            Answer::Ok => {}
        }
        let signed = verify(&self.secret.lock().unwrap(), headers, &body);
        let event: Value = serde_json::from_str(&body).unwrap();
        self.taken.lock().unwrap().push((event, signed));
        StatusCode::NO_CONTENT.into_response()
    }

    fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    /// The events taken, once there are `n`.
    async fn events(&self, n: usize) -> Vec<Value> {
        for _ in 0..200 {
            let taken = self.taken.lock().unwrap().clone();
            if taken.len() >= n {
                assert!(
                    taken.iter().all(|(_, signed)| *signed),
                    "every signature holds"
                );
                return taken.into_iter().map(|(e, _)| e).collect();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{} of {n} events arrived", self.taken.lock().unwrap().len());
    }
}

/// `Kep-Signature: t=…,v1=…` checked as a receiver would.
fn verify(secret: &str, headers: &HeaderMap, body: &str) -> bool {
    let Some(sig) = headers.get("kep-signature").and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mut t = None;
    let mut v1 = None;
    for part in sig.split(',') {
        match part.split_once('=') {
            Some(("t", x)) => t = Some(x),
            Some(("v1", x)) => v1 = Some(x),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    hex::decode(v1).is_ok_and(|v| mac.verify_slice(&v).is_ok())
}

/// `(event, room, participant, action)` of each event, for comparing.
fn steps(events: &[Value], room: &str) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["roomId"] == room)
        .map(|e| {
            let what = e["action"].as_str().or(e["event"].as_str()).unwrap();
            let who = e["participantId"].as_str().unwrap_or("");
            (what.to_owned(), who.to_owned())
        })
        .collect()
}

fn step(what: &str, who: &str) -> (String, String) {
    (what.to_owned(), who.to_owned())
}

async fn webhook_on(srv: &TestServer, service: &str, receiver: &Receiver) {
    let hook = srv
        .admin
        .set_live_webhook(service, &receiver.url, true)
        .await
        .unwrap();
    *receiver.secret.lock().unwrap() = hook.secret.unwrap();
}

#[tokio::test]
async fn every_room_change_arrives_signed_and_in_order_per_room() {
    let srv = spawn(|_| {}).await;
    let receiver = Receiver::start().await;
    let (s, rooms) = srv.room_client("demo").await;
    webhook_on(&srv, "demo", &receiver).await;

    let stream = srv.room_story(&s, &rooms).await;

    let events = receiver.events(12).await;
    assert_eq!(
        steps(&events, "lobby"),
        [
            step("Room.OnRoomOpened", ""),
            step("joined", "alice"),
            step("joined", "bob"),
            step("published", "alice"),
            step("inactivated", "alice"),
            step("kicked", "bob"),
            step("left", "alice"),
            step("Room.OnRoomClosed", ""),
        ]
    );
    assert_eq!(
        steps(&events, "hall"),
        [
            step("Room.OnRoomOpened", ""),
            step("joined", "carol"),
            step("left", "carol"),
            step("Room.OnRoomClosed", ""),
        ]
    );
    let published = events.iter().find(|e| e["action"] == "published").unwrap();
    assert_eq!(published["event"], "Room.OnStreamEvent");
    assert_eq!(published["streamId"], stream);
    assert_eq!(published["serviceId"], "demo");
    assert!(published["at"].as_i64().unwrap() > 0 && published["id"].is_string());

    // The deliveries list: each delivered at its first attempt, newest first. The receiver
    // can hold the last event before kep has recorded its answer (CI saw it pending).
    let deliveries = delivery(
        |d| (d.len() == 12 && d.iter().all(|d| d.status == "delivered")).then(|| d.to_vec()),
        &srv,
    )
    .await;
    assert!(deliveries.iter().all(|d| d.attempts == 1));
    assert_eq!(deliveries[0].event, "Room.OnRoomClosed");
    assert_eq!(deliveries[0].body["roomId"], "lobby");
}

#[tokio::test]
async fn a_receiver_down_for_a_while_gets_everything_in_order_once_back() {
    let srv = spawn(|s| s.webhook_retry_ms = 20).await;
    let receiver = Receiver::start().await;
    let (s, _rooms) = srv.room_client("demo").await;
    webhook_on(&srv, "demo", &receiver).await;
    receiver.set(Answer::Unavailable);

    let mut joined = Vec::new();
    for room in ["r1", "r2", "r3"] {
        for who in ["a", "b", "c"] {
            joined.push(srv.join(&s, room, who).await);
        }
    }
    drop(joined);
    // Failing for a while: attempts pile up, nothing is taken.
    for _ in 0..100 {
        if *receiver.tries.lock().unwrap() >= 9 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pending = srv
        .admin
        .live_webhook_deliveries("demo", None)
        .await
        .unwrap();
    let failing = pending.deliveries.iter().find(|d| d.attempts > 1).unwrap();
    assert_eq!(failing.status, "pending");
    assert_eq!(
        failing.last_error.as_deref(),
        Some("the receiver answered 503 Service Unavailable")
    );

    receiver.set(Answer::Ok);
    let events = receiver.events(3 * 8).await;
    for room in ["r1", "r2", "r3"] {
        assert_eq!(
            steps(&events, room),
            [
                step("Room.OnRoomOpened", ""),
                step("joined", "a"),
                step("joined", "b"),
                step("joined", "c"),
                step("left", "a"),
                step("left", "b"),
                step("left", "c"),
                step("Room.OnRoomClosed", ""),
            ],
            "{room}"
        );
    }
}

#[tokio::test]
async fn slow_redirecting_and_gone_receivers_are_met_as_they_should_be() {
    let srv = spawn(|s| {
        s.webhook_timeout_ms = 200;
        s.webhook_attempts = 2;
        s.webhook_retry_ms = 10;
    })
    .await;
    let receiver = Receiver::start().await;
    let (s, _rooms) = srv.room_client("demo").await;
    webhook_on(&srv, "demo", &receiver).await;

    // Slow: given up after its attempts, each cut off at the timeout; joining never waits.
    receiver.set(Answer::Slow);
    let started = std::time::Instant::now();
    let slow = srv.join(&s, "slow", "a").await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a join does not wait for the receiver"
    );
    let failed = delivery(
        |deliveries: &[kep_api::live::WebhookDelivery]| {
            deliveries
                .iter()
                .find(|d| d.room_id == "slow" && d.status == "failed")
                .cloned()
        },
        &srv,
    )
    .await;
    assert_eq!(failed.attempts, 2);
    assert_eq!(
        failed.last_error.as_deref(),
        Some("the receiver did not answer within 200 ms")
    );
    drop(slow);

    // Redirecting: not followed.
    receiver.set(Answer::Redirect);
    let moved = srv.join(&s, "moved", "a").await;
    let failed = delivery(
        |deliveries: &[kep_api::live::WebhookDelivery]| {
            deliveries
                .iter()
                .find(|d| d.room_id == "moved" && d.status == "failed")
                .cloned()
        },
        &srv,
    )
    .await;
    assert_eq!(
        failed.last_error.as_deref(),
        Some("the receiver answered 307 Temporary Redirect (a redirect is not followed)")
    );
    drop(moved);

    // Gone: the webhook is turned off, and says why; nothing more is recorded.
    receiver.set(Answer::Gone);
    let _gone = srv.join(&s, "gone", "a").await;
    for _ in 0..100 {
        if !srv.admin.live_webhook("demo").await.unwrap().enabled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let hook = srv.admin.live_webhook("demo").await.unwrap();
    assert!(!hook.enabled);
    assert!(hook.secret.is_none(), "the secret is shown only when set");
    let why = hook.disabled_reason.unwrap();
    assert!(
        why.starts_with("the receiver answered 410 Gone to event "),
        "{why}"
    );
    let tries = *receiver.tries.lock().unwrap();
    let _later = srv.join(&s, "later", "a").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        *receiver.tries.lock().unwrap(),
        tries,
        "an off webhook is not called"
    );

    // Set again, it is on and the reason is gone.
    let hook = srv
        .admin
        .set_live_webhook("demo", &receiver.url, true)
        .await
        .unwrap();
    assert!(hook.enabled && hook.disabled_reason.is_none());
}

/// The first delivery `pick` finds, within 10 s.
async fn delivery<T>(
    pick: impl Fn(&[kep_api::live::WebhookDelivery]) -> Option<T>,
    srv: &TestServer,
) -> T {
    eventually(Duration::from_secs(10), "a delivery", async || {
        let list = srv
            .admin
            .live_webhook_deliveries("demo", None)
            .await
            .unwrap();
        pick(&list.deliveries).ok_or(format!("{} deliveries", list.deliveries.len()))
    })
    .await
}

fn refused(e: ClientError) -> (u16, String) {
    match e {
        ClientError::Api { status, body } => {
            let body: Value = serde_json::from_str(&body).unwrap();
            (
                status,
                body["error"]["field"].as_str().unwrap_or("").to_owned(),
            )
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn webhook_calls_check_what_they_are_given() {
    let srv = spawn(|_| {}).await;
    srv.create_service("demo").await;
    for url in [
        "ftp://example.com/hook",
        "not a url",
        "http://",
        // One character over the 2,048 allowed ("http://h/" is 9 of them).
        &format!("http://h/{}", "x".repeat(2040)),
    ] {
        let e = srv
            .admin
            .set_live_webhook("demo", url, true)
            .await
            .unwrap_err();
        assert_eq!(refused(e), (400, "url".to_owned()), "{url}");
    }
    let e = srv
        .admin
        .set_live_webhook("nobody", "http://h/", true)
        .await
        .unwrap_err();
    assert_eq!(refused(e).0, 404);
    assert_eq!(
        refused(srv.admin.live_webhook("demo").await.unwrap_err()).0,
        404,
        "none set"
    );
    assert_eq!(
        refused(
            srv.admin
                .rotate_live_webhook_secret("demo")
                .await
                .unwrap_err()
        )
        .0,
        409,
        "a known service with nothing to rotate"
    );

    for len in [2047, 2048] {
        let url = format!("http://h/{}", "x".repeat(len - 9));
        let set = srv.admin.set_live_webhook("demo", &url, false).await;
        assert_eq!(set.unwrap().url, url, "{len} characters");
    }
    let set = srv
        .admin
        .set_live_webhook("demo", "https://h/x", false)
        .await
        .unwrap();
    let rotated = srv.admin.rotate_live_webhook_secret("demo").await.unwrap();
    assert_ne!(set.secret, rotated.secret);
    assert!(!rotated.enabled);
    let again = srv
        .admin
        .set_live_webhook("demo", "https://h/y", true)
        .await
        .unwrap();
    assert_eq!(again.secret, rotated.secret, "setting keeps the secret");

    for (limit, ok) in [(0, false), (1, true), (1000, true), (1001, false)] {
        let got = srv.admin.live_webhook_deliveries("demo", Some(limit)).await;
        match got {
            Ok(_) => assert!(ok, "{limit}"),
            Err(e) => assert_eq!(
                (refused(e), ok),
                ((400, "limit".to_owned()), false),
                "{limit}"
            ),
        }
    }
}
