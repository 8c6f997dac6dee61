//! Any standard WHIP/WHEP client (CONTRACT §1): peers set up as their users set them up —
//! aiortc under `max-bundle`, GStreamer's `webrtcbin` (an independent stack) with its
//! `sendrecv` sections and trickle ICE by `PATCH` — publish and subscribe, and each
//! section is answered the one way kep uses it.

use serde_json::Value;

use crate::common::{TestServer, spawn};
use crate::peers::{Peer, token};

/// The answer's directions, as the peer read them.
fn directions(answered: &Value) -> Vec<&str> {
    answered["directions"]
        .as_array()
        .expect("the answered line lists the directions")
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect()
}

/// Waits until `publisher` (which has printed nothing yet) is connected, its answer
/// `recvonly` throughout, and has printed the `also` lines: the stream's id and those.
async fn published(publisher: &mut Peer, also: &[&str]) -> (String, Vec<Value>) {
    let events: Vec<&str> = ["answered", "connected"]
        .iter()
        .chain(also)
        .copied()
        .collect();
    let mut lines = publisher.until_each(&events).await;
    let answered = lines.remove(0);
    assert_eq!(
        directions(&answered),
        ["recvonly", "recvonly"],
        "{answered}"
    );
    let stream = answered["stream_id"].as_str().unwrap().to_owned();
    (stream, lines.split_off(1))
}

/// Waits until `subscriber` decodes 320×240 video frames and audio, its answer `sendonly`.
async fn watches(subscriber: &mut Peer) {
    let answered = subscriber.until("answered").await;
    assert_eq!(
        directions(&answered),
        ["sendonly", "sendonly"],
        "{answered}"
    );
    let first = subscriber.until_kind("frame", Some("video")).await;
    assert_eq!(
        (first["width"].as_i64(), first["height"].as_i64()),
        (Some(320), Some(240)),
        "{first}"
    );
    subscriber.until_kind("frame", Some("audio")).await;
    // And the video goes on.
    while subscriber.until_kind("frame", Some("video")).await["count"].as_u64() < Some(30) {}
}

fn peer_token(srv: &TestServer, secret: &str, who: &str) -> String {
    token(srv, secret, "room", who)
}

/// RFC 9725 §4.2 asks WHIP clients for `max-bundle`: one transport for every section.
#[tokio::test]
async fn aiortc_under_max_bundle_publishes_and_subscribes() {
    let srv = spawn(|_| {}).await;
    let (s, _rooms) = srv.room_client("svc").await;
    let live = &srv.live_url;
    let alice = peer_token(&srv, &s.service_secret, "alice");
    let whip = format!("{live}/api/whip/room");
    let mut publisher = Peer::start(
        "publisher",
        &[
            "publish",
            "--url",
            &whip,
            "--token",
            &alice,
            "--max-bundle",
            "--sendrecv",
        ],
    );
    let (stream, _) = published(&mut publisher, &[]).await;
    let bob = peer_token(&srv, &s.service_secret, "bob");
    let whep = format!("{live}/api/whep/room/{stream}");
    let mut subscriber = Peer::start(
        "subscriber",
        &["subscribe", "--url", &whep, "--token", &bob, "--max-bundle"],
    );
    watches(&mut subscriber).await;
}

/// GStreamer publishes VP8, then H.264 (its x264 encoder), each watched by a GStreamer
/// and an aiortc subscriber; every candidate is trickled by PATCH and taken (204).
#[tokio::test]
async fn gstreamer_webrtcbin_publishes_and_subscribes_with_trickle_ice() {
    let srv = spawn(|_| {}).await;
    let (s, rooms) = srv.room_client("svc").await;
    let live = &srv.live_url;
    let whip = format!("{live}/api/whip/room");
    for (who, codec, listed) in [("vp", "vp8", "VP8"), ("avc", "h264", "H264")] {
        let t = peer_token(&srv, &s.service_secret, who);
        let mut publisher = Peer::gst(
            who,
            &["publish", "--url", &whip, "--token", &t, "--codec", codec],
        );
        let (stream, trickled) = published(&mut publisher, &["trickled"]).await;
        assert_eq!(trickled[0]["status"], 204, "{trickled:?}");
        let listing = rooms.list_participants("room").await.unwrap();
        let theirs = listing
            .participants
            .iter()
            .find(|p| p.participant_id == who)
            .unwrap();
        let codecs: Vec<&str> = theirs.streams[0]
            .tracks
            .iter()
            .map(|t| t.codec.as_str())
            .collect();
        assert_eq!(codecs, [listed, "opus"], "{listing:?}");

        let whep = format!("{live}/api/whep/room/{stream}");
        let g = peer_token(&srv, &s.service_secret, &format!("{who}-gst"));
        let mut gst = Peer::gst(
            "gst subscriber",
            &["subscribe", "--url", &whep, "--token", &g],
        );
        watches(&mut gst).await;
        let a = peer_token(&srv, &s.service_secret, &format!("{who}-aiortc"));
        let mut aiortc = Peer::start(
            "aiortc subscriber",
            &["subscribe", "--url", &whep, "--token", &a, "--max-bundle"],
        );
        watches(&mut aiortc).await;
    }
}

/// PATCH of a session: a trickle is 204; the wrong type 415, an ICE restart 422, a bad
/// candidate 400, another participant's or no session 404, no token 401; POST 405.
#[tokio::test]
async fn a_trickle_patch_is_checked_like_the_session_it_names() {
    let srv = spawn(|_| {}).await;
    let (s, _rooms) = srv.room_client("svc").await;
    let live = &srv.live_url;
    let alice = peer_token(&srv, &s.service_secret, "alice");
    let mut publisher = Peer::start(
        "publisher",
        &[
            "publish",
            "--url",
            &format!("{live}/api/whip/room"),
            "--token",
            &alice,
        ],
    );
    let answered = publisher.until("answered").await;
    let session = format!("{live}{}", answered["location"].as_str().unwrap());
    let frag = "a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuv\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host\r\na=end-of-candidates\r\n";
    let mallory = peer_token(&srv, &s.service_secret, "mallory");
    let http = reqwest::Client::new();
    let patch = |token: Option<&str>, content_type: &str, body: &str| {
        let mut req = http
            .patch(&session)
            .header("content-type", content_type)
            .body(body.to_owned());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req
    };
    let sdpfrag = "application/trickle-ice-sdpfrag";
    let cases = [
        (patch(Some(&alice), sdpfrag, frag), 204),
        (patch(Some(&alice), "application/sdp", frag), 415),
        (
            patch(Some(&alice), sdpfrag, frag).header("if-match", "*"),
            422,
        ),
        (
            patch(Some(&alice), sdpfrag, "a=candidate:nonsense\r\n"),
            400,
        ),
        (patch(Some(&mallory), sdpfrag, frag), 404),
        (patch(None, sdpfrag, frag), 401),
        (http.post(&session).bearer_auth(&alice), 405),
    ];
    for (i, (req, status)) in cases.into_iter().enumerate() {
        let res = req.send().await.unwrap();
        assert_eq!(res.status().as_u16(), status, "case {i}");
        if status == 405 {
            assert_eq!(res.headers()["allow"], "PATCH, DELETE");
        }
        if status != 204 {
            let body: Value = res.json().await.unwrap();
            assert!(body["error"]["code"].is_i64(), "case {i}: {body}");
        }
    }
    // The session took its trickle and goes on.
    publisher.until("connected").await;
}

/// A session is reached at its own URL only: a WHEP session under another stream's path,
/// or under WHIP's, is no session (404) and goes on; at its own URL it ends.
#[tokio::test]
async fn a_whep_session_is_ended_at_its_own_url_only() {
    let srv = spawn(|_| {}).await;
    let (s, _rooms) = srv.room_client("svc").await;
    let live = &srv.live_url;
    let alice = peer_token(&srv, &s.service_secret, "alice");
    let whip = format!("{live}/api/whip/room");
    let mut publisher = Peer::start("publisher", &["publish", "--url", &whip, "--token", &alice]);
    let (stream_id, _) = published(&mut publisher, &[]).await;
    let bob = peer_token(&srv, &s.service_secret, "bob");
    let whep = format!("{live}/api/whep/room/{stream_id}");
    let mut sub = Peer::start("bob", &["subscribe", "--url", &whep, "--token", &bob]);
    let answered = sub.until("answered").await;
    let location = answered["location"].as_str().unwrap();
    let session = location.rsplit('/').next().unwrap();
    assert_eq!(location, format!("/api/whep/room/{stream_id}/{session}"));
    let before = sub.until_kind("frame", Some("video")).await["count"]
        .as_i64()
        .unwrap();
    let http = reqwest::Client::new();
    let elsewhere = [
        format!(
            "{live}/api/whep/room/{}/{session}",
            stream_id.parse::<i64>().unwrap() + 1
        ),
        format!("{live}/api/whep/room/not-a-stream/{session}"),
        format!("{live}/api/whip/room/{session}"),
    ];
    for url in &elsewhere {
        let res = http.delete(url).bearer_auth(&bob).send().await.unwrap();
        assert_eq!(res.status(), 404, "DELETE {url}");
        let res = http
            .patch(url)
            .bearer_auth(&bob)
            .header("content-type", "application/trickle-ice-sdpfrag")
            .body("a=end-of-candidates\r\n")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 404, "PATCH {url}");
    }
    // Still watching: frames go on coming.
    while sub.until_kind("frame", Some("video")).await["count"]
        .as_i64()
        .unwrap()
        < before + 30
    {}
    let res = http
        .delete(format!("{live}{location}"))
        .bearer_auth(&bob)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    sub.until("closed").await;
}
