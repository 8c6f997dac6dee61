//! The rooms' own rules, without sockets.

use super::*;

fn participant(
    rooms: &Rooms,
    svc: &Arc<str>,
    room: &str,
    pid: &str,
) -> (ConnId, mpsc::UnboundedReceiver<Outbound>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let conn = next_conn_id();
    rooms.join(svc, &room.into(), &pid.into(), conn, tx);
    (conn, rx)
}

fn pid(id: &str) -> ParticipantId {
    ParticipantId::from(id)
}

/// Rooms with no grace and no media.
fn rooms() -> Arc<Rooms> {
    Arc::new(Rooms::new(
        Duration::ZERO,
        TaskTracker::new(),
        CancellationToken::new(),
    ))
}

fn texts(rx: &mut mpsc::UnboundedReceiver<Outbound>) -> Vec<serde_json::Value> {
    let mut out = vec![];
    while let Ok(m) = rx.try_recv() {
        match m {
            Outbound::Text(t) => out.push(serde_json::from_slice(&t).unwrap()),
            Outbound::Close { reason, .. } => out.push(serde_json::json!({ "close": reason })),
        }
    }
    out
}

#[tokio::test]
async fn kick_is_all_or_nothing() {
    let rooms = rooms();
    let svc: Arc<str> = "svc".into();
    let r = RoomId::from("r");
    let (_, mut a) = participant(&rooms, &svc, "r", "a");
    let (_, mut b) = participant(&rooms, &svc, "r", "b");
    texts(&mut a);
    let targets = [
        ParticipantTarget {
            participant_id: "a".into(),
        },
        ParticipantTarget {
            participant_id: "zz".into(),
        },
    ];
    let err = rooms.kick(&svc, &r, &targets).unwrap_err();
    assert!(matches!(err, LiveError::TargetsNotFound { ref missing } if missing.len() == 1));
    assert!(texts(&mut a).is_empty(), "nothing happened");
    let listing = rooms.list_participants(&svc, &r).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&listing)
            .matches("participantId")
            .count(),
        2
    );

    rooms.kick(&svc, &r, &targets[..1]).unwrap();
    let got = texts(&mut a);
    assert_eq!(got[0]["event"], "Kicked");
    assert_eq!(got[1]["close"], "kicked");
    let got = texts(&mut b);
    assert_eq!(got.last().unwrap()["event"], "ParticipantLeft");
}

#[tokio::test]
async fn the_last_leave_ends_the_room_and_a_stale_socket_never_removes_its_replacement() {
    let rooms = rooms();
    let svc: Arc<str> = "svc".into();
    let r = RoomId::from("r");
    let (old, mut old_rx) = participant(&rooms, &svc, "r", "a");
    let (new, _new_rx) = participant(&rooms, &svc, "r", "a");
    assert!(matches!(texts(&mut old_rx).last(), Some(v) if v["close"] == "replaced"));
    rooms.leave(&svc, &r, &pid("a"), old);
    assert_eq!(rooms.list_rooms("svc"), vec![r.clone()]);
    rooms.leave(&svc, &r, &pid("a"), new);
    assert!(rooms.list_rooms("svc").is_empty());
}

#[tokio::test]
async fn the_listing_is_rebuilt_after_a_change() {
    let rooms = rooms();
    let svc: Arc<str> = "svc".into();
    let r = RoomId::from("r");
    let (conn, _rx) = participant(&rooms, &svc, "r", "a");
    let before = rooms.list_participants(&svc, &r).unwrap();
    let sid = rooms.publish(&svc, &r, &pid("a"), conn).unwrap();
    let after = rooms.list_participants(&svc, &r).unwrap();
    assert_ne!(before, after);
    assert!(String::from_utf8_lossy(&after).contains(&format!("\"streamId\":{sid}")));
}

#[tokio::test]
async fn a_participant_in_by_its_media_keeps_it_across_a_socket() {
    let rooms = rooms();
    let svc: Arc<str> = "svc".into();
    let r = RoomId::from("r");
    let (_, mut watcher) = participant(&rooms, &svc, "r", "w");
    let video = vec![TrackInfo {
        kind: "video".into(),
        codec: "VP8".into(),
        layers: vec![],
    }];
    // A WHIP publish brings the participant in, with no socket.
    let media = rooms
        .media_started(&svc, &r, &pid("m"), Some(video))
        .unwrap();
    let seen: Vec<String> = texts(&mut watcher)
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(seen, ["ParticipantJoined", "StreamPublished"]);
    // Its socket joins later: the same participant, nobody told of a second join.
    let (conn, mut socket) = participant(&rooms, &svc, "r", "m");
    assert!(texts(&mut watcher).is_empty());
    assert!(texts(&mut socket).is_empty());
    let own = rooms.publish(&svc, &r, &pid("m"), conn).unwrap();
    // A socket cannot unpublish the WHIP stream; its own, yes.
    assert!(!rooms.unpublish(&svc, &r, &pid("m"), conn, media));
    // The socket goes: its stream ends with it, the WHIP stream and the participant stay.
    texts(&mut watcher);
    rooms.leave(&svc, &r, &pid("m"), conn);
    let got = texts(&mut watcher);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0]["event"].as_str(), got[0]["streamId"].as_i64()),
        (Some("StreamUnpublished"), Some(own))
    );
    let listing = String::from_utf8(rooms.list_participants(&svc, &r).unwrap().to_vec()).unwrap();
    assert!(
        listing.contains(r#""participantId":"m","streams":[{"streamId":"#),
        "{listing}"
    );
    // Its last session ends: it leaves.
    rooms.media_ended(&svc, &r, &pid("m"), Some(media));
    let seen: Vec<String> = texts(&mut watcher)
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(seen, ["StreamUnpublished", "ParticipantLeft"]);
}
