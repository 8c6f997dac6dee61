//! The live API end to end: JSON-RPC over HTTP and participants over real WebSockets.

mod common;

use std::time::Duration;

use axum::routing::post;
use common::{expect_event, expect_quiet, next, spawn};
use kep_api::live::{
    ClientMessage, CreateServiceRequest, EventKind, Scheme, ServerMessage, provision_value,
};
use kep_client::ClientError;
use kep_client::live::{LiveClient, Participant};
use kep_core::service::Service as _;
use serde_json::{Value, json};

fn rpc_code(e: &ClientError) -> i64 {
    match e {
        ClientError::Rpc(e) => e.code,
        other => panic!("expected a JSON-RPC error, got {other}"),
    }
}

fn rpc_data(e: &ClientError) -> Value {
    match e {
        ClientError::Rpc(e) => e.data.clone().unwrap_or(Value::Null),
        other => panic!("expected a JSON-RPC error, got {other}"),
    }
}

// ---- Provision ----

#[tokio::test]
async fn provision_issues_a_token_in_two_steps() {
    let srv = spawn(|_| {}).await;
    let secrets = srv.create_service("svc").await;
    let client = LiveClient::new(&srv.live_url);

    let (status, step1) = srv
        .raw_rpc("application/json", None, r#"{"jsonrpc":"2.0","id":"1","method":"Provision","params":{"version":"2.0","serviceId":"svc","scheme":"internal"}}"#)
        .await;
    assert_eq!(status, 200);
    assert_eq!(step1["id"], "1");
    assert_eq!(step1["error"]["code"], -11002);
    assert_eq!(step1["error"]["message"], "Unauthorized");
    let nonce = step1["error"]["data"]["nonce"].as_str().unwrap().to_owned();

    // value = sha256hex(sha256hex("svc:<adminSecret>") + ":" + nonce); the helper is checked
    // against sha256sum in its unit test.
    let value = provision_value("svc", &secrets.admin_secret, &nonce);
    let result = client
        .provision_with("svc", Scheme::Internal, &nonce, &value)
        .await
        .unwrap();
    assert_eq!(result.ttl, 3600);
    assert_eq!(result.api, srv.live_url);
    assert!(result.token.len() >= 22);
    assert_eq!(result.uuid.len(), 36);

    let rooms = LiveClient::new(&result.api)
        .with_token(&result.token)
        .list_rooms()
        .await
        .unwrap();
    assert!(rooms.is_empty());

    // The nonce was used up.
    let again = client
        .provision_with("svc", Scheme::Internal, &nonce, &value)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&again), -11002);
}

#[tokio::test]
async fn every_failed_step_2_answers_a_fresh_nonce() {
    let srv = spawn(|_| {}).await;
    let secrets = srv.create_service("svc").await;
    srv.create_service("other").await;
    let client = LiveClient::new(&srv.live_url);

    let nonce = client
        .provision_nonce("svc", Scheme::Internal)
        .await
        .unwrap();
    let wrong = client
        .provision_with("svc", Scheme::Internal, &nonce, "0000")
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&wrong), -11002);
    let fresh = rpc_data(&wrong)["nonce"].as_str().unwrap().to_owned();
    assert_ne!(fresh, nonce);

    // The fresh nonce is good for a correct step 2.
    let value = provision_value("svc", &secrets.admin_secret, &fresh);
    client
        .provision_with("svc", Scheme::Internal, &fresh, &value)
        .await
        .unwrap();

    // Unknown nonce, unknown service, key that is not the serviceId, another service's nonce.
    let value = provision_value("svc", &secrets.admin_secret, "made-up");
    let e = client
        .provision_with("svc", Scheme::Internal, "made-up", &value)
        .await
        .unwrap_err();
    assert!(rpc_data(&e)["nonce"].is_string());
    let n = client
        .provision_nonce("nope", Scheme::Internal)
        .await
        .unwrap();
    let e = client
        .provision_with("nope", Scheme::Internal, &n, "x")
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
    assert!(rpc_data(&e)["nonce"].is_string());
    let n = client
        .provision_nonce("other", Scheme::Internal)
        .await
        .unwrap();
    let value = provision_value("svc", &secrets.admin_secret, &n);
    let e = client
        .provision_with("svc", Scheme::Internal, &n, &value)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002, "a nonce issued for another service");

    let n = client
        .provision_nonce("svc", Scheme::Internal)
        .await
        .unwrap();
    let params = json!({"serviceId":"svc","scheme":"internal","auth":{"nonce":n,"key":"other","value":provision_value("svc", &secrets.admin_secret, &n)}});
    let e = client
        .call::<_, Value>(2, "Provision", params)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002, "auth.key must be the serviceId");

    // The ordinary service secret is not the admin secret.
    let n = client
        .provision_nonce("svc", Scheme::Internal)
        .await
        .unwrap();
    let value = provision_value("svc", &secrets.service_secret, &n);
    let e = client
        .provision_with("svc", Scheme::Internal, &n, &value)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);

    // `external` without a verifier configured.
    let n = client
        .provision_nonce("svc", Scheme::External)
        .await
        .unwrap();
    let value = provision_value("svc", &secrets.admin_secret, &n);
    let e = client
        .provision_with("svc", Scheme::External, &n, &value)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
}

#[tokio::test]
async fn step_2_must_come_within_the_transaction_window() {
    let srv = spawn(|s| s.provision_window_s = 1).await;
    let secrets = srv.create_service("svc").await;
    let client = LiveClient::new(&srv.live_url);
    let n = client
        .provision_nonce("svc", Scheme::Internal)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let value = provision_value("svc", &secrets.admin_secret, &n);
    let e = client
        .provision_with("svc", Scheme::Internal, &n, &value)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
    // Its fresh nonce opens a fresh window.
    let fresh = rpc_data(&e)["nonce"].as_str().unwrap().to_owned();
    let value = provision_value("svc", &secrets.admin_secret, &fresh);
    client
        .provision_with("svc", Scheme::Internal, &fresh, &value)
        .await
        .unwrap();
}

#[tokio::test]
async fn provision_params_are_checked_first() {
    let srv = spawn(|_| {}).await;
    let client = LiveClient::new(&srv.live_url);
    let cases = [
        (json!({"scheme": "internal"}), "serviceId"),
        (json!({"serviceId": "svc"}), "scheme"),
        (json!({"serviceId": "svc", "scheme": "bogus"}), "scheme"),
        (json!({"serviceId": 5, "scheme": "internal"}), "serviceId"),
        (
            json!({"serviceId": "svc", "scheme": "internal", "version": 2}),
            "version",
        ),
        (
            json!({"serviceId": "svc", "scheme": "internal", "auth": {"key": "svc", "value": "v"}}),
            "auth.nonce",
        ),
        (json!({"serviceId": "", "scheme": "internal"}), "serviceId"),
    ];
    for (params, field) in cases {
        let e = client
            .call::<_, Value>(1, "Provision", params.clone())
            .await
            .unwrap_err();
        assert_eq!(rpc_code(&e), -32602, "{params}");
        assert_eq!(rpc_data(&e)["field"], field, "{params}");
    }
}

#[tokio::test]
async fn external_scheme_asks_the_customers_verifier() {
    let srv = spawn(|_| {}).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let verifier = axum::Router::new().route(
        "/verify",
        post(move |axum::Json(body): axum::Json<Value>| {
            let tx = tx.clone();
            async move {
                let ok = body["value"] == "let-me-in";
                tx.send(body).unwrap();
                if ok {
                    axum::http::StatusCode::NO_CONTENT
                } else {
                    axum::http::StatusCode::FORBIDDEN
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/verify", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, verifier).await });
    srv.admin
        .create_live_service(&CreateServiceRequest {
            service_id: Some("ext".into()),
            external_verifier_url: Some(url),
        })
        .await
        .unwrap();

    let client = LiveClient::new(&srv.live_url);
    let n = client
        .provision_nonce("ext", Scheme::External)
        .await
        .unwrap();
    let e = client
        .provision_with("ext", Scheme::External, &n, "wrong")
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
    assert_eq!(
        rx.recv().await.unwrap(),
        json!({"serviceId": "ext", "nonce": n, "value": "wrong"})
    );

    let n = rpc_data(&e)["nonce"].as_str().unwrap().to_owned();
    let ok = client
        .provision_with("ext", Scheme::External, &n, "let-me-in")
        .await
        .unwrap();
    assert!(!ok.token.is_empty());

    // Removing the verifier turns `external` off again.
    srv.admin.set_live_verifier("ext", None).await.unwrap();
    let n = client
        .provision_nonce("ext", Scheme::External)
        .await
        .unwrap();
    let e = client
        .provision_with("ext", Scheme::External, &n, "let-me-in")
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
}

// ---- the envelope ----

#[tokio::test]
async fn envelope_errors_have_their_codes() {
    let srv = spawn(|s| s.body_limit_bytes = 256).await;
    let j = "application/json";
    let cases: [(&str, i64); 8] = [
        ("{not json", -32700),
        (
            r#"{"jsonrpc":"1.0","id":"1","method":"Room.ListRooms","params":{}}"#,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"Room.ListRooms","params":{}}"#,
            -32600,
        ),
        (r#"{"jsonrpc":"2.0","id":"1","params":{}}"#, -32600),
        (
            r#"[{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms","params":{}}]"#,
            -32600,
        ),
        (r#""just a string""#, -32600),
        (
            r#"{"jsonrpc":"2.0","id":"1","method":"Room.Nope","params":{}}"#,
            -32601,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListParticipants","params":[]}"#,
            -32602,
        ),
    ];
    for (body, code) in cases {
        let (status, answer) = srv.raw_rpc(j, None, body).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
    }
    // The id is echoed whatever its form.
    let (_, answer) = srv
        .raw_rpc(j, None, r#"{"jsonrpc":"2.0","id":7,"method":"Room.Nope"}"#)
        .await;
    assert_eq!(answer["id"], 7);

    // Content-Type.
    let (status, answer) = srv
        .raw_rpc(
            "text/plain",
            None,
            r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms"}"#,
        )
        .await;
    assert_eq!(status, 415);
    assert_eq!(answer["error"]["code"], -32600);
    let (status, _) = srv
        .raw_rpc(
            "application/json; charset=utf-8",
            None,
            r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms"}"#,
        )
        .await;
    assert_eq!(status, 200);

    // The body limit: at it, and one over.
    let base = r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms","params":{"version":""}}"#;
    let pad = |n: usize| {
        base.replace(
            r#""version":"""#,
            &format!(r#""version":"{}""#, "x".repeat(n)),
        )
    };
    let at = pad(256 - base.len());
    assert_eq!(at.len(), 256);
    let (status, answer) = srv.raw_rpc(j, None, at).await;
    assert_eq!(
        (status, answer["error"]["code"].as_i64()),
        (200, Some(-11002))
    );
    let over = pad(257 - base.len());
    let (status, answer) = srv.raw_rpc(j, None, over).await;
    assert_eq!(status, 413);
    assert_eq!(answer["error"]["code"], -32600);
}

// ---- Room methods ----

#[tokio::test]
async fn room_calls_need_a_live_token_of_their_own_service() {
    let srv = spawn(|s| s.token_ttl_s = 1).await;
    let (a, client_a) = srv.room_client("a").await;
    let (_, client_b) = srv.room_client("b").await;
    let _p = srv.join(&a, "room", "p1").await;

    let e = LiveClient::new(&srv.live_url)
        .list_rooms()
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
    assert!(
        rpc_data(&e).get("nonce").is_none(),
        "a Room call's Unauthorized has no nonce"
    );
    let e = LiveClient::new(&srv.live_url)
        .with_token("forged")
        .list_rooms()
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11002);

    assert_eq!(
        client_a.list_rooms().await.unwrap(),
        vec!["room".to_owned()]
    );
    assert!(
        client_b.list_rooms().await.unwrap().is_empty(),
        "b does not see a's rooms"
    );
    let e = client_b.list_participants("room").await.unwrap_err();
    assert_eq!(rpc_code(&e), -11004);
    assert_eq!(rpc_data(&e), json!({"roomId": "room"}));
    let e = client_b.destroy_room("room").await.unwrap_err();
    assert_eq!(rpc_code(&e), -11004);
    // Every call on a's room answers b exactly as a room that does not exist: no oracle.
    let p1 = vec!["p1".to_owned()];
    let stream = [("p1".to_owned(), 1)];
    for room in ["room", "nowhere"] {
        let errors = [
            client_b.list_participants(room).await.unwrap_err(),
            client_b.destroy_room(room).await.unwrap_err(),
            client_b.kick(room, &p1).await.unwrap_err(),
            client_b.inactivate(room, &stream).await.unwrap_err(),
        ];
        for e in errors {
            assert_eq!(rpc_code(&e), -11004, "{room}: {e}");
            assert_eq!(rpc_data(&e), json!({"roomId": room}));
        }
    }
    assert_eq!(
        client_a.list_rooms().await.unwrap(),
        vec!["room".to_owned()],
        "untouched"
    );
    assert_eq!(
        client_a
            .list_participants("room")
            .await
            .unwrap()
            .participants
            .len(),
        1,
        "p1 still there"
    );

    // The token expires after its ttl (1 s here).
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let e = client_a.list_rooms().await.unwrap_err();
    assert_eq!(rpc_code(&e), -11002);
}

#[tokio::test]
async fn room_params_are_checked_before_any_lookup() {
    let srv = spawn(|s| s.max_targets = 3).await;
    let (_, client) = srv.room_client("svc").await;
    let cases = [
        ("Room.ListParticipants", json!({}), "roomId"),
        ("Room.DestroyRoom", json!({"roomId": 1}), "roomId"),
        ("Room.KickParticipant", json!({"roomId": "r"}), "targets"),
        (
            "Room.KickParticipant",
            json!({"roomId": "r", "targets": []}),
            "targets",
        ),
        (
            "Room.KickParticipant",
            json!({"roomId": "r", "targets": [{"participantId": 1}]}),
            "targets[0].participantId",
        ),
        (
            "Room.InactiveStream",
            json!({"roomId": "r", "targets": [{"participantId": "p"}]}),
            "targets[0].streamId",
        ),
        (
            "Room.InactiveStream",
            json!({"roomId": "r", "targets": [{"participantId": "p", "streamId": "1"}]}),
            "targets[0].streamId",
        ),
    ];
    for (method, params, field) in cases {
        let e = client
            .call::<_, Value>(1, method, params.clone())
            .await
            .unwrap_err();
        assert_eq!(rpc_code(&e), -32602, "{method} {params}");
        assert_eq!(rpc_data(&e)["field"], field, "{method} {params}");
    }
    // The target limit: 3 pass validation (and then miss), 4 do not.
    let three = json!({"roomId": "r", "targets": [{"participantId": "a"}, {"participantId": "b"}, {"participantId": "c"}]});
    let e = client
        .call::<_, Value>(1, "Room.KickParticipant", three)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11004);
    let four = json!({"roomId": "r", "targets": [{"participantId": "a"}, {"participantId": "b"}, {"participantId": "c"}, {"participantId": "d"}]});
    let e = client
        .call::<_, Value>(1, "Room.KickParticipant", four)
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -32602);
    // Without a token, params still come first.
    let e = LiveClient::new(&srv.live_url)
        .call::<_, Value>(1, "Room.ListParticipants", json!({}))
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -32602);
}

#[tokio::test]
async fn participants_see_the_room_change_and_admins_command_it() {
    let srv = spawn(|_| {}).await;
    let (s, client) = srv.room_client("svc").await;
    let mut a = srv.join(&s, "room", "a").await;
    let mut b = srv.join(&s, "room", "b").await;
    assert_eq!(
        expect_event(&mut a, EventKind::ParticipantJoined)
            .await
            .0
            .as_deref(),
        Some("b")
    );
    let ServerMessage::Joined { participants, .. } = &b.joined else {
        panic!()
    };
    assert_eq!(participants.len(), 2);

    let sid = b.publish().await.unwrap();
    assert_eq!(
        expect_event(&mut a, EventKind::StreamPublished).await,
        (Some("b".into()), Some(sid))
    );
    let listing = client.list_participants("room").await.unwrap();
    assert_eq!(
        serde_json::to_value(&listing).unwrap(),
        json!({"participants": [{"participantId": "a", "streams": []}, {"participantId": "b", "streams": [{"streamId": sid}]}]})
    );

    // InactiveStream with one missing target does nothing.
    let e = client
        .inactivate("room", &[("b".into(), sid), ("b".into(), 999)])
        .await
        .unwrap_err();
    assert_eq!(rpc_code(&e), -11004);
    assert_eq!(
        rpc_data(&e),
        json!({"missing": [{"participantId": "b", "streamId": 999}]})
    );
    expect_quiet(&mut b).await;
    client
        .inactivate("room", &[("b".into(), sid)])
        .await
        .unwrap();
    assert_eq!(
        expect_event(&mut b, EventKind::InactivatedStream).await,
        (Some("b".into()), Some(sid))
    );
    assert_eq!(
        expect_event(&mut a, EventKind::StreamUnpublished).await,
        (Some("b".into()), Some(sid))
    );
    assert!(
        client.list_participants("room").await.unwrap().participants[1]
            .streams
            .is_empty()
    );

    // The later spelling works too.
    let sid2 = b.publish().await.unwrap();
    expect_event(&mut a, EventKind::StreamPublished).await;
    client
        .call::<_, Value>(
            1,
            "Room.InactivateStream",
            json!({"roomId": "room", "targets": [{"participantId": "b", "streamId": sid2}]}),
        )
        .await
        .unwrap();
    expect_event(&mut b, EventKind::InactivatedStream).await;
    expect_event(&mut a, EventKind::StreamUnpublished).await;

    // Kick: all targets must exist.
    let mut c = srv.join(&s, "room", "c").await;
    expect_event(&mut a, EventKind::ParticipantJoined).await;
    expect_event(&mut b, EventKind::ParticipantJoined).await;
    let e = client
        .kick("room", &["b".into(), "ghost".into()])
        .await
        .unwrap_err();
    assert_eq!(
        rpc_data(&e),
        json!({"missing": [{"participantId": "ghost"}]})
    );
    expect_quiet(&mut b).await;
    client.kick("room", &["b".into()]).await.unwrap();
    assert_eq!(
        expect_event(&mut b, EventKind::Kicked).await.0.as_deref(),
        Some("b")
    );
    assert_eq!(next(&mut b).await.unwrap_err().reason, "kicked");
    assert_eq!(
        expect_event(&mut a, EventKind::ParticipantLeft)
            .await
            .0
            .as_deref(),
        Some("b")
    );
    expect_event(&mut c, EventKind::ParticipantLeft).await;
    let ids: Vec<_> = client
        .list_participants("room")
        .await
        .unwrap()
        .participants
        .into_iter()
        .map(|p| p.participant_id)
        .collect();
    assert_eq!(ids, ["a", "c"]);

    // Destroy: everyone gets RoomDestroyed, then the close.
    let other = srv.join(&s, "other-room", "z").await;
    assert_eq!(client.destroy_room("room").await.unwrap().room_id, "room");
    for p in [&mut a, &mut c] {
        expect_event(p, EventKind::RoomDestroyed).await;
        assert_eq!(next(p).await.unwrap_err().reason, "room destroyed");
    }
    assert_eq!(
        client.list_rooms().await.unwrap(),
        vec!["other-room".to_owned()]
    );
    assert_eq!(
        rpc_code(&client.list_participants("room").await.unwrap_err()),
        -11004
    );
    drop(other);
}

#[tokio::test]
async fn a_room_ends_with_its_last_participant() {
    let srv = spawn(|_| {}).await;
    let (s, client) = srv.room_client("svc").await;
    let mut a = srv.join(&s, "room", "a").await;
    let mut b = srv.join(&s, "room", "b").await;
    expect_event(&mut a, EventKind::ParticipantJoined).await;
    b.send(&ClientMessage::Leave).await.unwrap();
    assert_eq!(next(&mut b).await.unwrap_err().reason, "left");
    expect_event(&mut a, EventKind::ParticipantLeft).await;
    drop(a); // a dropped socket leaves at once (reconnect grace 0)
    for _ in 0..50 {
        if client.list_rooms().await.unwrap().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the room outlived its last participant");
}

#[tokio::test]
async fn a_second_join_with_the_same_participant_id_replaces_the_first() {
    let srv = spawn(|_| {}).await;
    let (s, client) = srv.room_client("svc").await;
    let mut watcher = srv.join(&s, "room", "w").await;
    let mut old = srv.join(&s, "room", "p").await;
    expect_event(&mut watcher, EventKind::ParticipantJoined).await;
    let sid = old.publish().await.unwrap();
    expect_event(&mut watcher, EventKind::StreamPublished).await;
    let _new = srv.join(&s, "room", "p").await;
    let closed = next(&mut old).await.unwrap_err();
    assert_eq!(closed.reason, "replaced");
    // The old connection's stream ended with it; the participant stays.
    assert_eq!(
        expect_event(&mut watcher, EventKind::StreamUnpublished)
            .await
            .1,
        Some(sid)
    );
    let listing = client.list_participants("room").await.unwrap();
    assert_eq!(listing.participants.len(), 2);
    assert!(listing.participants[1].streams.is_empty());
}

#[tokio::test]
async fn a_dropped_participant_may_come_back_within_the_reconnect_grace() {
    let srv = spawn(|s| s.reconnect_grace_s = 1).await;
    let (s, client) = srv.room_client("svc").await;
    let count = || async {
        client
            .list_participants("room")
            .await
            .unwrap()
            .participants
            .len()
    };
    let mut watcher = srv.join(&s, "room", "w").await;
    let p = srv.join(&s, "room", "p").await;
    expect_event(&mut watcher, EventKind::ParticipantJoined).await;
    drop(p);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count().await, 2, "still in the room during the grace");
    let _back = srv.join(&s, "room", "p").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(count().await, 2, "the one who came back stays");
    expect_quiet(&mut watcher).await;

    let q = srv.join(&s, "room", "q").await;
    expect_event(&mut watcher, EventKind::ParticipantJoined).await;
    drop(q);
    assert_eq!(
        expect_event(&mut watcher, EventKind::ParticipantLeft)
            .await
            .0
            .as_deref(),
        Some("q"),
        "gone once the grace is over"
    );
    assert_eq!(count().await, 2);
}

#[tokio::test]
async fn an_empty_room_lingers_for_its_grace() {
    let srv = spawn(|s| s.empty_room_grace_s = 1).await;
    let (s, client) = srv.room_client("svc").await;
    let mut a = srv.join(&s, "room", "a").await;
    a.send(&ClientMessage::Leave).await.unwrap();
    assert_eq!(next(&mut a).await.unwrap_err().reason, "left");
    assert_eq!(client.list_rooms().await.unwrap(), ["room"]);
    assert!(
        client
            .list_participants("room")
            .await
            .unwrap()
            .participants
            .is_empty()
    );

    // A join within the grace keeps the room.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _b = srv.join(&s, "room", "b").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(client.list_rooms().await.unwrap(), ["room"]);
    drop(_b);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(
        client.list_rooms().await.unwrap().is_empty(),
        "gone after the grace"
    );
}

// ---- bad participants ----

#[tokio::test]
async fn bad_participants_are_refused_and_others_untouched() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;

    let srv = spawn(|s| s.join_timeout_s = 1).await;
    let (s, client) = srv.room_client("svc").await;
    let mut member = srv.join(&s, "room", "m").await;
    let ws_url = format!("{}/api/ws", srv.live_url.replacen("http", "ws", 1));

    async fn open(
        url: &str,
    ) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>
    {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let challenge: Value =
            serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
        assert_eq!(challenge["type"], "challenge");
        ws
    }
    async fn refused(
        ws: &mut tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
    ) -> (i64, String) {
        let err: Value =
            serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
        assert_eq!(err["type"], "error");
        let Message::Close(Some(frame)) = ws.next().await.unwrap().unwrap() else {
            panic!("expected a close")
        };
        (err["code"].as_i64().unwrap(), frame.reason.to_string())
    }

    let mut ws = open(&ws_url).await;
    ws.send(Message::text("garbage")).await.unwrap();
    assert_eq!(refused(&mut ws).await, (-32700, "invalid join".to_owned()));

    let mut ws = open(&ws_url).await;
    ws.send(Message::text(r#"{"type":"publish"}"#))
        .await
        .unwrap();
    assert_eq!(refused(&mut ws).await.0, -32600);

    let mut ws = open(&ws_url).await;
    ws.send(Message::text(
        r#"{"type":"join","serviceId":"svc","roomId":"room","value":"wrong"}"#,
    ))
    .await
    .unwrap();
    assert_eq!(refused(&mut ws).await, (-11002, "unauthorized".to_owned()));

    let mut ws = open(&ws_url).await;
    ws.send(Message::text(
        r#"{"type":"join","serviceId":"svc","value":"x"}"#,
    ))
    .await
    .unwrap();
    assert_eq!(refused(&mut ws).await.0, -32602);

    // Never answering the challenge: closed after the join timeout.
    let mut ws = open(&ws_url).await;
    assert_eq!(refused(&mut ws).await.1, "join timeout");

    // A joined participant that sends garbage gets an error and stays.
    member
        .send(&ClientMessage::Unpublish { stream_id: 42 })
        .await
        .unwrap();
    assert!(matches!(
        next(&mut member).await,
        Ok(ServerMessage::Error { code: -11004, .. })
    ));
    let stream_id = member.publish().await.unwrap();
    assert_eq!(stream_id, 1);

    let listing = client.list_participants("room").await.unwrap();
    assert_eq!(listing.participants.len(), 1, "no refused socket joined");
    expect_quiet(&mut member).await;
}

#[tokio::test]
async fn shutdown_closes_every_participant_with_a_close_frame() {
    let srv = spawn(|_| {}).await;
    let (s, _) = srv.room_client("svc").await;
    let mut a = srv.join(&s, "room", "a").await;
    srv.shutdown.cancel();
    let closed = next(&mut a).await.unwrap_err();
    assert_eq!(
        (closed.code, closed.reason.as_str()),
        (1001, "server shutting down")
    );
    tokio::time::timeout(Duration::from_secs(5), srv.service.stop())
        .await
        .unwrap();
}

#[tokio::test]
async fn operator_calls_need_the_operator_token() {
    let srv = spawn(|_| {}).await;
    let admin_url = srv.admin.base_url().to_owned();
    let res = reqwest::Client::new()
        .get(format!("{admin_url}/admin/v1/live/services"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");

    let created = srv.create_service("svc").await;
    let dup = srv
        .admin
        .create_live_service(&CreateServiceRequest {
            service_id: Some("svc".into()),
            external_verifier_url: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(dup, ClientError::Api { status: 409, .. }));
    let bad = srv
        .admin
        .create_live_service(&CreateServiceRequest {
            service_id: Some("no:colons".into()),
            external_verifier_url: None,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(bad, ClientError::Api { status: 400, ref body } if body.contains("serviceId"))
    );
    let generated = srv
        .admin
        .create_live_service(&CreateServiceRequest::default())
        .await
        .unwrap();
    let listed = srv.admin.list_live_services().await.unwrap();
    assert_eq!(listed, ["svc", generated.service_id.as_str()]);
    let one = srv.admin.live_service("svc").await.unwrap();
    assert_eq!(
        (one.service_id.as_str(), one.external_verifier_url),
        ("svc", None)
    );
    assert!(matches!(
        srv.admin.live_service("ghost").await.unwrap_err(),
        ClientError::Api { status: 404, .. }
    ));

    // Rotation: the old admin secret stops working, the new one works.
    let rotated = srv.admin.rotate_live_secrets("svc").await.unwrap();
    let client = LiveClient::new(&srv.live_url);
    assert_eq!(
        rpc_code(
            &client
                .provision("svc", &created.admin_secret)
                .await
                .unwrap_err()
        ),
        -11002
    );
    client
        .provision("svc", &rotated.admin_secret)
        .await
        .unwrap();
    assert!(matches!(
        srv.admin.rotate_live_secrets("ghost").await.unwrap_err(),
        ClientError::Api { status: 404, .. }
    ));

    // Malformed JSON is answered in the operator error shape.
    let res = reqwest::Client::new()
        .post(format!("{admin_url}/admin/v1/live/services"))
        .bearer_auth(common::OPERATOR_TOKEN)
        .header("content-type", "application/json")
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_body");
}

/// Found by schema fuzzing (fuzz/schema.sh): a JSON array was read as the request object
/// (`[null, null]` created a service with a generated id), and a field of the wrong type was
/// a 422 where every other refusal of the operator API is a 400 naming the field.
#[tokio::test]
async fn an_operator_body_is_an_object_and_a_mistyped_field_is_a_400_naming_it() {
    let srv = spawn(|_| {}).await;
    let admin_url = srv.admin.base_url().to_owned();
    let cases = [
        (
            "POST",
            "/admin/v1/live/services",
            "[null, null]",
            "invalid_body",
            None,
        ),
        (
            "POST",
            "/admin/v1/live/services",
            "\"svc\"",
            "invalid_body",
            None,
        ),
        (
            "POST",
            "/admin/v1/live/services",
            r#"{"serviceId": 5}"#,
            "invalid_field",
            Some("serviceId"),
        ),
        (
            "PATCH",
            "/admin/v1/live/services/svc",
            "[]",
            "invalid_body",
            None,
        ),
        (
            "PATCH",
            "/admin/v1/live/services/svc",
            r#"{"externalVerifierUrl": ["http://x"]}"#,
            "invalid_field",
            Some("externalVerifierUrl"),
        ),
    ];
    for (method, path, body, code, field) in cases {
        let res = reqwest::Client::new()
            .request(method.parse().unwrap(), format!("{admin_url}{path}"))
            .bearer_auth(common::OPERATOR_TOKEN)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "{method} {path} {body}");
        let answer: Value = res.json().await.unwrap();
        assert_eq!(
            answer["error"]["code"], code,
            "{method} {path} {body}: {answer}"
        );
        assert_eq!(answer["error"]["field"].as_str(), field, "{answer}");
    }
    assert!(srv.admin.list_live_services().await.unwrap().is_empty());
}

/// Found by schema fuzzing (fuzz/schema.sh): a path segment that does not parse was answered
/// as plain text, not in the operator API's error shape.
#[tokio::test]
async fn an_operator_path_that_does_not_parse_is_a_400_in_the_operator_shape() {
    let srv = spawn(|_| {}).await;
    let res = reqwest::Client::new()
        .get(format!(
            "{}/admin/v1/live/services/%FF",
            srv.admin.base_url()
        ))
        .bearer_auth(common::OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let answer: Value = res.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "invalid_path", "{answer}");
}

// ---- Limits ----

const LIST_ROOMS: &str = r#"{"jsonrpc":"2.0","id":"1","method":"Room.ListRooms","params":{}}"#;

/// A fresh service's admin token.
async fn admin_token(srv: &common::TestServer, id: &str) -> String {
    let secrets = srv.create_service(id).await;
    LiveClient::new(&srv.live_url)
        .provision(id, &secrets.admin_secret)
        .await
        .unwrap()
        .token
}

/// `Room.ListRooms` with `token`: (HTTP status, `Retry-After`, body).
async fn list_rooms(
    srv: &common::TestServer,
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
fn held_call(srv: &common::TestServer, token: &str) -> kep_client::Held {
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
    let mut refilled = false;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if list_rooms(&srv, Some(&a), LIST_ROOMS).await.0 == 200 {
            refilled = true;
            break;
        }
    }
    assert!(refilled, "the bucket refills");
}

#[tokio::test]
async fn a_service_may_have_only_so_many_calls_in_flight() {
    let srv = spawn(|s| s.limits.concurrency_limit = 2).await;
    let a = admin_token(&srv, "a").await;
    let b = admin_token(&srv, "b").await;
    // Two calls whose bodies have not finished arriving are in flight.
    let mut held = vec![held_call(&srv, &a), held_call(&srv, &a)];
    // Once the server has them both, a third call of a is refused; b's pass.
    let mut refused = None;
    for _ in 0..600 {
        // A call that came first took a slot, and a held one was refused: hold another.
        for h in &mut held {
            if h.0.is_finished() {
                *h = held_call(&srv, &a);
            }
        }
        let answer = list_rooms(&srv, Some(&a), LIST_ROOMS).await;
        if answer.0 == 429 {
            refused = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = refused.expect("a third call in flight is refused");
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
