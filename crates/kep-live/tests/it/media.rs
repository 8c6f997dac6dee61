//! Real media through kep's rooms: aiortc publishes over WHIP and subscribes over WHEP
//! (tests/media_peer.py), every peer on 127.0.0.1; the Room methods act on the sessions.

use kep_api::live::{EventKind, JoinClaims};
use kep_client::live::{LiveClient, Participant, join_token};
use serde_json::Value;

use crate::common::spawn;
use crate::peers::{Peer, token, until_event};

#[tokio::test]
async fn media_flows_from_a_whip_publisher_to_whep_subscribers_until_the_room_stops_it() {
    let srv = spawn(|_| {}).await;
    let (s, rooms) = srv.room_client("svc").await;
    let live = &srv.live_url;
    // The owner is also on the socket, to hear what happens to its stream.
    let alice = token(&srv, &s.service_secret, "room", "alice");
    let mut owner = Participant::join_with_token(live, &alice).await.unwrap();

    let whip = format!("{live}/api/whip/room");
    let mut publisher = Peer::start("publisher", &["publish", "--url", &whip, "--token", &alice]);
    let answered = publisher.until("answered").await;
    let stream_id = answered["stream_id"]
        .as_str()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    assert!(
        answered["location"]
            .as_str()
            .unwrap()
            .starts_with("/api/whip/room/")
    );
    publisher.until("connected").await;
    let listing = rooms.list_participants("room").await.unwrap();
    assert_eq!(listing.participants[0].participant_id, "alice");
    assert_eq!(listing.participants[0].streams[0].stream_id, stream_id);
    // Its tracks, as the offer's answer set them: aiortc offers VP8 first, then Opus.
    let tracks: Vec<(&str, &str)> = listing.participants[0].streams[0]
        .tracks
        .iter()
        .map(|t| (t.kind.as_str(), t.codec.as_str()))
        .collect();
    assert_eq!(tracks, [("video", "VP8"), ("audio", "opus")], "{listing:?}");

    // Two subscribers decode what alice sends.
    let whep = format!("{live}/api/whep/room/{stream_id}");
    let mut subscribers: Vec<Peer> = ["bob", "carol"]
        .into_iter()
        .map(|who| {
            let t = token(&srv, &s.service_secret, "room", who);
            Peer::start(
                who,
                &["subscribe", "--url", &whep, "--token", &t, "--frames", "30"],
            )
        })
        .collect();
    for sub in &mut subscribers {
        let first = sub.until_kind("frame", Some("video")).await;
        assert_eq!(
            (first["width"].as_i64(), first["height"].as_i64()),
            (Some(320), Some(240)),
            "{first}"
        );
        sub.until("enough").await;
    }

    // Room.InactiveStream: every subscriber's session is closed (its frames stop), the
    // owner is told, and the publishing session ends.
    let started = std::time::Instant::now();
    rooms
        .inactivate("room", &[("alice".into(), stream_id)])
        .await
        .unwrap();
    for sub in &mut subscribers {
        sub.until("closed").await;
    }
    eprintln!(
        "media: subscribers closed {:?} after Room.InactiveStream",
        started.elapsed()
    );
    // The subscribers joined the room meanwhile (ParticipantJoined first).
    let inactivated = until_event(&mut owner, EventKind::InactivatedStream).await;
    assert_eq!(
        (inactivated.participant_id.as_deref(), inactivated.stream_id),
        (Some("alice"), Some(stream_id))
    );
    publisher.until("closed").await;
    let listing = rooms.list_participants("room").await.unwrap();
    assert!(listing.participants[0].streams.is_empty(), "{listing:?}");
    // A subscribe to the stream that ended is a 404.
    let late = token(&srv, &s.service_secret, "room", "late");
    let mut late = Peer::start("late", &["subscribe", "--url", &whep, "--token", &late]);
    assert_eq!(late.refused().await["status"], 404);
}

#[tokio::test]
async fn kick_and_destroy_end_every_session() {
    let srv = spawn(|_| {}).await;
    let (s, rooms) = srv.room_client("svc").await;
    let live = &srv.live_url;
    let dave = token(&srv, &s.service_secret, "stage", "dave");
    let mut publisher = Peer::start(
        "publisher",
        &[
            "publish",
            "--url",
            &format!("{live}/api/whip/stage"),
            "--token",
            &dave,
        ],
    );
    let stream_id = publisher.until("answered").await["stream_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let erin = token(&srv, &s.service_secret, "stage", "erin");
    let whep = format!("{live}/api/whep/stage/{stream_id}");
    let mut erin_sub = Peer::start("erin", &["subscribe", "--url", &whep, "--token", &erin]);
    erin_sub.until("frame").await;
    // A subscriber is in the room while it watches; kicking it ends its session, and the
    // publisher goes on.
    let listing = rooms.list_participants("stage").await.unwrap();
    let present: Vec<&str> = listing
        .participants
        .iter()
        .map(|p| p.participant_id.as_str())
        .collect();
    assert_eq!(present, ["dave", "erin"]);
    rooms.kick("stage", &["erin".into()]).await.unwrap();
    erin_sub.until("closed").await;
    let frank = token(&srv, &s.service_secret, "stage", "frank");
    let mut frank_sub = Peer::start("frank", &["subscribe", "--url", &whep, "--token", &frank]);
    frank_sub.until("frame").await;
    // Destroying the room ends the publisher and the subscriber.
    rooms.destroy_room("stage").await.unwrap();
    frank_sub.until("closed").await;
    publisher.until("closed").await;
    assert!(rooms.list_rooms().await.unwrap().is_empty());
    drop((erin_sub, publisher));
}

#[tokio::test]
async fn bad_offers_tokens_and_garbage_are_refused_and_touch_nothing_else() {
    let srv = spawn(|_| {}).await;
    let (s, _rooms) = srv.room_client("svc").await;
    let other = srv.create_service("other").await;
    let live = &srv.live_url;
    let http = reqwest::Client::new();
    let post = |url: String, token: Option<String>, ct: &'static str, body: &'static str| {
        let mut req = http.post(url).header("content-type", ct).body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let good = token(&srv, &s.service_secret, "room", "gina");
    let mut viewer = JoinClaims {
        iss: "svc".into(),
        room: "room".into(),
        sub: "v".into(),
        exp: srv.clock.unix_s() + 60,
        publish: Some(false),
        subscribe: Some(false),
    };
    let viewer_token = join_token("svc", &s.service_secret, &viewer);
    viewer.iss = "other".into();
    let other_token = join_token("other", &other.service_secret, &viewer);
    let whip = format!("{live}/api/whip/room");
    let cases = [
        (
            post(whip.clone(), None, "application/sdp", "v=0"),
            401,
            "no token",
        ),
        (
            post(whip.clone(), Some("nope".into()), "application/sdp", "v=0"),
            401,
            "not a token",
        ),
        (
            post(
                format!("{live}/api/whip/elsewhere"),
                Some(good.clone()),
                "application/sdp",
                "v=0",
            ),
            403,
            "another room",
        ),
        (
            post(
                whip.clone(),
                Some(viewer_token.clone()),
                "application/sdp",
                "v=0",
            ),
            403,
            "publish: false",
        ),
        (
            post(
                format!("{live}/api/whep/room/1"),
                Some(viewer_token),
                "application/sdp",
                "v=0",
            ),
            403,
            "subscribe: false",
        ),
        (
            post(whip.clone(), Some(other_token), "application/sdp", "v=0"),
            403,
            "another service's room",
        ),
        (
            post(whip.clone(), Some(good.clone()), "text/plain", "v=0"),
            415,
            "not SDP",
        ),
        (
            post(
                whip.clone(),
                Some(good.clone()),
                "application/sdp",
                "v=0\r\nnonsense",
            ),
            400,
            "malformed SDP",
        ),
        (
            post(
                format!("{live}/api/whep/room/x"),
                Some(good.clone()),
                "application/sdp",
                "v=0",
            ),
            400,
            "stream id",
        ),
    ];
    for (call, status, what) in cases {
        let res = call.await.unwrap();
        assert_eq!(res.status().as_u16(), status, "{what}");
        let body: Value = res.json().await.unwrap();
        assert!(body["error"]["code"].is_i64(), "{what}: {body}");
    }
    // A web page of another origin may call (CORS): the preflight allows it, and the
    // answer's Location and Kep-Stream-Id are exposed to it.
    let preflight = http
        .request(reqwest::Method::OPTIONS, &whip)
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    assert_eq!(preflight.headers()["access-control-allow-origin"], "*");
    let sdk = http
        .get(format!("{live}/sdk/kep-live.js"))
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(sdk.headers()["access-control-allow-origin"], "*");
    assert!(
        sdk.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    // An offer with no codec kep takes: 400 naming why.
    let g722_only = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n\
        m=audio 9 UDP/TLS/RTP/SAVPF 9\r\nc=IN IP4 127.0.0.1\r\na=mid:0\r\na=sendonly\r\n\
        a=rtpmap:9 G722/8000\r\na=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n\
        a=fingerprint:sha-256 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r\n\
        a=setup:actpass\r\na=rtcp-mux\r\n";
    let res = post(
        whip.clone(),
        Some(good.clone()),
        "application/sdp",
        g722_only,
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert!(
        body["error"]["data"]["reason"]
            .as_str()
            .unwrap()
            .contains("no track"),
        "{body}"
    );

    // A real session, then garbage at the media port from another socket: the session
    // goes on, and an unknown stream or session is a 404.
    let mut publisher = Peer::start("publisher", &["publish", "--url", &whip, "--token", &good]);
    let stream_id = publisher.until("answered").await["stream_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let hal = token(&srv, &s.service_secret, "room", "hal");
    let whep = format!("{live}/api/whep/room/{stream_id}");
    let mut sub = Peer::start(
        "hal",
        &[
            "subscribe",
            "--url",
            &whep,
            "--token",
            &hal,
            "--frames",
            "60",
        ],
    );
    sub.until("frame").await;
    let flood = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let media = srv.service.media_addr();
    for i in 0..20_000u32 {
        let mut junk = [0u8; 200];
        junk[..4].copy_from_slice(&i.to_be_bytes());
        // Some of it looks like STUN, RTP and DTLS by its first byte.
        junk[0] = [0x00, 0x80, 0x16, 0xff][i as usize % 4];
        let _ = flood.send_to(&junk, media).await;
    }
    sub.until("enough").await;
    let res = post(
        format!("{live}/api/whep/room/999"),
        Some(hal.clone()),
        "application/sdp",
        "v=0",
    )
    .await
    .unwrap();
    assert!(
        matches!(res.status().as_u16(), 400 | 404),
        "{}",
        res.status()
    );
    let res = http
        .delete(format!("{live}/api/whip/room/no-such-session"))
        .bearer_auth(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    drop(publisher);
}

/// Subscribing to a stream that ended, or never had media, is a 404.
#[tokio::test]
async fn a_subscribe_to_a_stream_without_a_publisher_is_a_404() {
    let srv = spawn(|_| {}).await;
    let (s, _rooms) = srv.room_client("svc").await;
    let live = &srv.live_url;
    let ivy = token(&srv, &s.service_secret, "room", "ivy");
    // A stream published over the socket carries no media.
    let mut p = Participant::join_with_token(live, &ivy).await.unwrap();
    p.send(&kep_api::live::ClientMessage::Publish)
        .await
        .unwrap();
    let mut sub = Peer::start(
        "sub",
        &[
            "subscribe",
            "--url",
            &format!("{live}/api/whep/room/1"),
            "--token",
            &ivy,
        ],
    );
    let refused = sub.refused().await;
    assert_eq!(refused["status"], 404, "{refused}");
    let _ = LiveClient::new(live);
}

/// A publisher that vanishes without a word (killed): its session ends once ICE hears
/// nothing from it (15 s, str0m's lite agent), and the room is told its stream ended.
#[tokio::test]
async fn a_publisher_that_vanishes_is_unpublished_when_ice_lapses() {
    let srv = spawn(|_| {}).await;
    let (s, rooms) = srv.room_client("svc").await;
    let live = &srv.live_url;
    let watcher = token(&srv, &s.service_secret, "room", "watcher");
    let mut watcher = Participant::join_with_token(live, &watcher).await.unwrap();
    let jo = token(&srv, &s.service_secret, "room", "jo");
    let mut publisher = Peer::start(
        "publisher",
        &[
            "publish",
            "--url",
            &format!("{live}/api/whip/room"),
            "--token",
            &jo,
        ],
    );
    publisher.until("connected").await;
    let published = until_event(&mut watcher, EventKind::StreamPublished).await;
    drop(publisher);
    let started = std::time::Instant::now();
    let unpublished = until_event(&mut watcher, EventKind::StreamUnpublished).await;
    eprintln!(
        "media: a vanished publisher unpublished after {:?}",
        started.elapsed()
    );
    assert_eq!(unpublished.stream_id, published.stream_id);
    let left = until_event(&mut watcher, EventKind::ParticipantLeft).await;
    assert_eq!(left.participant_id.as_deref(), Some("jo"));
    let listing = rooms.list_participants("room").await.unwrap();
    assert_eq!(listing.participants.len(), 1, "{listing:?}");
}

/// A publisher whose DTLS handshake fails (its offer's fingerprint is not its
/// certificate's): its session ends and its stream with it, while a stream beside it in
/// the room flows on to its subscriber.
#[tokio::test]
async fn a_failed_dtls_handshake_ends_that_session_alone() {
    let srv = spawn(|_| {}).await;
    let (s, rooms) = srv.room_client("svc").await;
    let live = &srv.live_url;
    let watcher = token(&srv, &s.service_secret, "room", "watcher");
    let mut watcher = Participant::join_with_token(live, &watcher).await.unwrap();
    let whip = format!("{live}/api/whip/room");
    let good = token(&srv, &s.service_secret, "room", "good");
    let mut publisher = Peer::start("publisher", &["publish", "--url", &whip, "--token", &good]);
    let stream = publisher.until("answered").await["stream_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let viewer = token(&srv, &s.service_secret, "room", "viewer");
    let whep = format!("{live}/api/whep/room/{stream}");
    let mut subscriber = Peer::start(
        "subscriber",
        &["subscribe", "--url", &whep, "--token", &viewer],
    );
    subscriber.until_kind("frame", Some("video")).await;

    let bad = token(&srv, &s.service_secret, "room", "bad");
    let mut forger = Peer::start(
        "forger",
        &[
            "publish",
            "--url",
            &whip,
            "--token",
            &bad,
            "--bad-fingerprint",
        ],
    );
    // The offer is answered (kep cannot know before the handshake); the handshake fails.
    let forged = forger.until("answered").await["stream_id"].clone();
    let unpublished = loop {
        let e = until_event(&mut watcher, EventKind::StreamUnpublished).await;
        if e.participant_id.as_deref() == Some("bad") {
            break e;
        }
    };
    let forged: i64 = forged.as_str().unwrap().parse().unwrap();
    assert_eq!(unpublished.stream_id, Some(forged));
    let left = until_event(&mut watcher, EventKind::ParticipantLeft).await;
    assert_eq!(left.participant_id.as_deref(), Some("bad"));
    // The stream beside it flows on.
    let before = subscriber.until_kind("frame", Some("video")).await["count"]
        .as_u64()
        .unwrap();
    let after = subscriber.until_kind("frame", Some("video")).await["count"]
        .as_u64()
        .unwrap();
    assert!(after > before);
    let listing = rooms.list_participants("room").await.unwrap();
    let ids: Vec<&str> = listing
        .participants
        .iter()
        .map(|p| p.participant_id.as_str())
        .collect();
    assert!(!ids.contains(&"bad") && ids.contains(&"good"), "{ids:?}");
}

/// An offer is read up to `live.body_limit_bytes`: at and under the limit it is judged as
/// an offer (this one does not parse: 400), one byte over it is a 413 and never read. A
/// trickle likewise: at and under the limit it is judged (no such session: 404), over it
/// 413.
#[tokio::test]
async fn an_offer_and_a_trickle_are_read_up_to_the_body_limit() {
    let srv = spawn(|s| s.body_limit_bytes = 1000).await;
    let (s, _rooms) = srv.room_client("svc").await;
    let whip = format!("{}/api/whip/room", srv.live_url);
    let good = token(&srv, &s.service_secret, "room", "gina");
    let http = reqwest::Client::new();
    let offer = |size: usize| {
        http.post(&whip)
            .header("content-type", "application/sdp")
            .body("v".repeat(size))
    };
    let trickle = |size: usize| {
        http.patch(format!("{whip}/no-such-session"))
            .header("content-type", "application/trickle-ice-sdpfrag")
            .body("v".repeat(size))
    };
    let cases = [
        (offer(999), 400),
        (offer(1000), 400),
        (offer(1001), 413),
        (trickle(999), 404),
        (trickle(1000), 404),
        (trickle(1001), 413),
    ];
    for (i, (req, status)) in cases.into_iter().enumerate() {
        let res = req.bearer_auth(&good).send().await.unwrap();
        assert_eq!(res.status().as_u16(), status, "case {i}");
        let body: Value = res.json().await.unwrap();
        assert!(body["error"]["code"].is_i64(), "case {i}: {body}");
    }
}
