//! Live across nodes: Room methods, participants' events, WHIP and WHEP redirects, and
//! the webhook events a dead node left.

use std::collections::BTreeMap;
use std::time::Duration;

use kep_api::live::{EventKind, ServerMessage};
use kep_client::live::{LiveClient, Participant};
use serde_json::Value;

use super::Cluster;
use crate::common::{eventually, receive_webhooks};

/// Messages until the event `kind` (others, such as a join, go by); panics on a close first.
async fn until_event(p: &mut Participant, kind: EventKind) -> kep_api::live::Event {
    loop {
        match tokio::time::timeout(Duration::from_secs(30), p.next()).await {
            Ok(Ok(Ok(ServerMessage::Event(e)))) if e.event == kind => return e,
            Ok(Ok(Ok(_))) => {}
            other => panic!("waiting for {kind:?}: {other:?}"),
        }
    }
}

/// Room `r`'s participants, as `Room.ListParticipants` through this client lists them, sorted.
async fn participant_ids(client: &LiveClient) -> Vec<String> {
    let mut ids: Vec<_> = (client.list_participants("r").await.unwrap().participants)
        .into_iter()
        .map(|p| p.participant_id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn room_methods_on_any_node_act_where_the_participants_are() {
    let cluster = Cluster::start(3, &[]);
    let live = |i: usize| cluster.nodes[i].live.clone();
    let secrets = cluster.live_service("rooms").await;
    let token = LiveClient::new(&live(0))
        .provision("rooms", &secrets.admin_secret)
        .await
        .unwrap()
        .token;
    let on = |i: usize| LiveClient::new(&live(i)).with_token(&token);

    // Alice joins room r on node 1, Bob on node 3: every node lists both.
    let join = |i: usize, who: &'static str| {
        let (base, secret) = (live(i), secrets.service_secret.clone());
        async move {
            Participant::join(&base, "rooms", &secret, "r", Some(who))
                .await
                .unwrap()
        }
    };
    let mut alice = join(0, "alice").await;
    let mut bob = join(2, "bob").await;
    for i in 0..3 {
        assert_eq!(on(i).list_rooms().await.unwrap(), ["r"], "node {}", i + 1);
        assert_eq!(
            participant_ids(&on(i)).await,
            ["alice", "bob"],
            "node {}",
            i + 1
        );
    }

    // Kicked through node 1 (which has only Alice): Bob, on node 3, hears it and is gone.
    let missing = on(0).kick("r", &["bob".into(), "carol".into()]).await;
    assert!(missing.is_err(), "all targets or none: {missing:?}");
    on(0).kick("r", &["bob".into()]).await.unwrap();
    until_event(&mut bob, EventKind::Kicked).await;
    assert_eq!(participant_ids(&on(1)).await, ["alice"]);

    // The room joined on node 1, destroyed through node 2.
    on(1).destroy_room("r").await.unwrap();
    until_event(&mut alice, EventKind::RoomDestroyed).await;
    for i in 0..3 {
        assert!(
            on(i).list_rooms().await.unwrap().is_empty(),
            "node {}",
            i + 1
        );
    }
    let gone = on(2).destroy_room("r").await;
    assert!(gone.is_err(), "a room no node has: {gone:?}");
}

/// Participants of one room who joined different nodes get each other's events, in order,
/// and the one who joins later is told of those already there; their streams' ids differ.
/// The room's webhook hears it open once and close once, though each node opened and
/// closed its part of it.
#[tokio::test]
async fn participants_on_different_nodes_get_each_others_events() {
    let cluster = Cluster::start(2, &[]);
    let secrets = cluster.live_service("spread").await;
    // A receiver that is down: the events wait, listed, in the database.
    let port = port0_tcp();
    cluster
        .admin(0)
        .set_live_webhook("spread", &format!("http://127.0.0.1:{port}/hook"), true)
        .await
        .unwrap();
    let join = |i: usize, who: &'static str| {
        let (base, secret) = (
            cluster.nodes[i].live.clone(),
            secrets.service_secret.clone(),
        );
        async move {
            Participant::join(&base, "spread", &secret, "r", Some(who))
                .await
                .unwrap()
        }
    };
    let mut alice = join(0, "alice").await;
    let alice_stream = alice.publish().await.unwrap();
    let mut bob = join(1, "bob").await;
    let ServerMessage::Joined { participants, .. } = &bob.joined else {
        unreachable!()
    };
    let there: BTreeMap<_, _> = participants
        .iter()
        .map(|p| (p.participant_id.as_str(), p.streams.len()))
        .collect();
    assert_eq!(there, BTreeMap::from([("alice", 1), ("bob", 0)]));

    let joined = until_event(&mut alice, EventKind::ParticipantJoined).await;
    assert_eq!(joined.participant_id.as_deref(), Some("bob"));
    let bob_stream = bob.publish().await.unwrap();
    assert_ne!(bob_stream, alice_stream);
    let published = until_event(&mut alice, EventKind::StreamPublished).await;
    assert_eq!(
        (published.participant_id.as_deref(), published.stream_id),
        (Some("bob"), Some(bob_stream))
    );
    let second = alice.publish().await.unwrap();
    let mut published = until_event(&mut bob, EventKind::StreamPublished).await;
    // Bob's join asked node 1 for its participants, which may overtake node 1's relay of
    // Alice's first stream: he may hear of it after his snapshot showed it (README).
    if published.stream_id == Some(alice_stream) {
        published = until_event(&mut bob, EventKind::StreamPublished).await;
    }
    assert_eq!(
        (published.participant_id.as_deref(), published.stream_id),
        (Some("alice"), Some(second))
    );
    drop(bob);
    let left = until_event(&mut alice, EventKind::ParticipantLeft).await;
    assert_eq!(left.participant_id.as_deref(), Some("bob"));
    drop(alice);

    let admin = cluster.admin(1);
    eventually(Duration::from_secs(20), "the room's events", async || {
        let list = admin.live_webhook_deliveries("spread", None).await;
        let list = list.map_err(|e| e.to_string())?.deliveries;
        let count = |event: &str| list.iter().filter(|d| d.event == event).count();
        let seen = (count("Room.OnRoomOpened"), count("Room.OnRoomClosed"));
        // Joined twice, left twice.
        if seen == (1, 1) && count("Room.OnParticipantEvent") == 4 {
            Ok(())
        } else {
            Err(format!("{seen:?}: {list:?}"))
        }
    })
    .await;
}

/// A loopback port nothing listens on.
fn port0_tcp() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A room's media runs on one node: WHIP and WHEP on another node answer `307` to it, for a
/// valid join token of the room only.
#[tokio::test]
async fn whip_and_whep_on_another_node_go_to_the_one_with_the_rooms_media() {
    let cluster = Cluster::start(2, &[]);
    let (one, two) = (&cluster.nodes[0].live, &cluster.nodes[1].live);
    let secrets = cluster.live_service("media").await;
    let token = |room: &str, who: &str| {
        let claims = kep_api::live::JoinClaims {
            iss: "media".into(),
            room: room.into(),
            sub: who.into(),
            exp: jiff::Timestamp::now().as_second() + 600,
            publish: None,
            subscribe: None,
        };
        kep_client::live::join_token("media", &secrets.service_secret, &claims)
    };
    // A real publisher (aiortc) on node 1: the room's media runs there.
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../kep-live/tests/media_peer.py"
    );
    let mut publisher = std::process::Command::new("python3")
        .args([
            script,
            "publish",
            "--url",
            &format!("{one}/api/whip/r"),
            "--token",
        ])
        .arg(token("r", "alice"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 with aiortc (the test command installs it)");
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(publisher.stdout.take().unwrap()));
    let answered: Value = loop {
        let line: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        if line["event"] == "answered" {
            break line;
        }
        assert_ne!(line["event"], "refused", "{line}");
    };
    let stream = answered["stream_id"].as_str().unwrap().to_owned();

    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let offer = |url: String, token: String| {
        http.post(url)
            .bearer_auth(token)
            .header("content-type", "application/sdp")
            .body("v=0\r\n")
            .send()
    };
    for path in ["/api/whip/r".to_owned(), format!("/api/whep/r/{stream}")] {
        let res = offer(format!("{two}{path}"), token("r", "bob"))
            .await
            .unwrap();
        assert_eq!(res.status(), 307, "{path}");
        assert_eq!(res.headers()["location"], format!("{one}{path}").as_str());
    }
    // A token of another room, or none: node 2 answers itself, and tells nothing.
    let res = offer(format!("{two}/api/whip/r"), token("elsewhere", "bob"))
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let res = offer(format!("{two}/api/whip/r"), "forged".into())
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    // A room whose media runs nowhere yet is node 2's own (this offer is not one).
    let res = offer(format!("{two}/api/whip/new"), token("new", "bob"))
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let _ = publisher.kill();
    let _ = publisher.wait();
}

/// Room events a node wrote down and could not deliver before it was killed -9 are sent by
/// another node once its receiver is back, each once, though three nodes could take them.
#[tokio::test]
async fn webhook_events_a_dead_node_left_go_out_from_another_once() {
    let mut cluster = Cluster::start(3, &[("KEP_LIVE_WEBHOOK_RETRY_MS", "50")]);
    // A port with nothing on it: the receiver is down until node 2 is dead.
    let port = port0_tcp();
    let secrets = cluster.live_service("hooks").await;
    // Set through node 1; the room's events are written by node 2.
    cluster
        .admin(0)
        .set_live_webhook("hooks", &format!("http://127.0.0.1:{port}/hook"), true)
        .await
        .unwrap();
    let alice = Participant::join(
        &cluster.nodes[1].live,
        "hooks",
        &secrets.service_secret,
        "r",
        Some("alice"),
    )
    .await
    .unwrap();
    let admin = cluster.admin(2);
    let written = eventually(Duration::from_secs(20), "the events tried", async || {
        let list = admin.live_webhook_deliveries("hooks", None).await;
        let list = list.map_err(|e| e.to_string())?.deliveries;
        // The room's first event failing again and again, the second waiting its turn.
        let tried = list.iter().any(|d| d.attempts > 1);
        if list.len() == 2 && tried && list.iter().all(|d| d.status == "pending") {
            Ok(list)
        } else {
            Err(format!("{list:?}"))
        }
    })
    .await;
    let victim = &mut cluster.nodes[1].child;
    victim.kill().unwrap();
    victim.wait().unwrap();
    drop(alice);

    let taken = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    receive_webhooks(
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap(),
        std::sync::Arc::clone(&taken),
    );
    eventually(Duration::from_secs(30), "both delivered", async || {
        let list = admin.live_webhook_deliveries("hooks", None).await;
        let list = list.map_err(|e| e.to_string())?.deliveries;
        if list.iter().all(|d| d.status == "delivered") {
            Ok(())
        } else {
            Err(format!("{list:?}"))
        }
    })
    .await;
    // Deliberate: two more rounds of adoption (every 3 s), in which a second send would show.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let mut ids: Vec<String> = taken
        .lock()
        .unwrap()
        .iter()
        .map(|(_, body)| serde_json::from_str::<Value>(body).unwrap()["id"].to_string())
        .collect();
    ids.sort();
    let mut expected: Vec<String> = written.iter().map(|d| format!("{:?}", d.id)).collect();
    expected.sort();
    assert_eq!(ids, expected, "each event once");
}
