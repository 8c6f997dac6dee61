//! Room methods and participants over real WebSockets: what they see, how a room ends,
//! bad participants, shutdown.

use std::time::Duration;

use kep_api::live::{ClientMessage, EventKind, ServerMessage};
use kep_client::live::LiveClient;
use kep_core::service::Service as _;
use serde_json::{Value, json};

use crate::common::{eventually, expect_event, expect_quiet, next, rpc_code, rpc_data, spawn};

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

    // The token expires after its ttl (1 s here): the server compares its expiry with the
    // clock at each call.
    srv.clock.advance(Duration::from_millis(999));
    client_a.list_rooms().await.unwrap();
    srv.clock.advance(Duration::from_millis(1));
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
    eventually(
        Duration::from_secs(10),
        "the room ends with its last participant",
        async || match client.list_rooms().await.unwrap() {
            rooms if rooms.is_empty() => Ok(()),
            rooms => Err(format!("{rooms:?}")),
        },
    )
    .await;
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
    // Deliberate: a moment for the server to see the socket gone, well within the grace.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count().await, 2, "still in the room during the grace");
    let _back = srv.join(&s, "room", "p").await;
    // Deliberate: past the end of p's first grace, which must not remove the one who came back.
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

    // A join within the grace keeps the room. Deliberate: b joins halfway through the grace,
    // and the room is looked at past its end.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _b = srv.join(&s, "room", "b").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(client.list_rooms().await.unwrap(), ["room"]);
    drop(_b);
    eventually(
        Duration::from_secs(10),
        "gone after the grace",
        async || match client.list_rooms().await.unwrap() {
            rooms if rooms.is_empty() => Ok(()),
            rooms => Err(format!("{rooms:?}")),
        },
    )
    .await;
}

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
        .send(&ClientMessage::Unpublish(kep_api::live::Unpublish {
            stream_id: 42,
        }))
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
