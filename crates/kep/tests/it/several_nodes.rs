//! Several `kep serve` processes on one PostgreSQL are one platform (CONTRACT §5): what is
//! created or changed through one node holds on every other from the moment it answered,
//! and a node killed in the middle of a load loses nothing accepted.

mod postgres;

use std::collections::BTreeMap;
use std::time::Duration;

use kep_api::live::{EventKind, Scheme, ServerMessage, provision_value};
use kep_client::AdminClient;
use kep_client::live::{LiveClient, Participant};
use kep_client::messaging::MessagingClient;
use serde_json::{Value, json};

use crate::common::{Server, eventually, port0, receive_webhooks, serve};
use postgres::Postgres;

const OPERATOR_TOKEN: &str = "several-nodes-operator";

/// Nodes on one fresh database, started at once (as a deployment would), each with its own
/// data dir and ports.
struct Cluster {
    nodes: Vec<Server>,
    _dirs: Vec<tempfile::TempDir>,
    _database: Postgres,
}

impl Cluster {
    fn start(count: usize, env: &[(&str, &str)]) -> Cluster {
        let database = Postgres::start();
        let dirs: Vec<_> = (0..count).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut env: Vec<(&str, &str)> = env.to_vec();
        env.extend([
            ("KEP_DATABASE_URL", database.url.as_str()),
            ("KEP_ADMIN_TOKEN", OPERATOR_TOKEN),
        ]);
        let nodes = std::thread::scope(|s| {
            let starting: Vec<_> = dirs
                .iter()
                .map(|d| s.spawn(|| serve(d.path(), &port0(), &env)))
                .collect();
            starting.into_iter().map(|t| t.join().unwrap()).collect()
        });
        Cluster {
            nodes,
            _dirs: dirs,
            _database: database,
        }
    }

    fn admin(&self, node: usize) -> AdminClient {
        AdminClient::new(&self.nodes[node].admin, OPERATOR_TOKEN)
    }

    /// A live service made through node 1: its secrets.
    async fn live_service(&self, id: &str) -> kep_api::live::ServiceSecrets {
        self.admin(0)
            .create_live_service(&kep_api::live::CreateServiceRequest {
                service_id: Some(id.into()),
                external_verifier_url: None,
            })
            .await
            .unwrap()
    }
}

fn sms(cid: &str, number: &str) -> Value {
    json!({"cid": cid, "message_type": "SM", "phone_number": number,
        "message": "여러 노드", "sender_no": "0212345678"})
}

#[tokio::test]
async fn tokens_and_secrets_hold_on_every_node_at_once() {
    let cluster = Cluster::start(3, &[]);
    let node = |i: usize| &cluster.nodes[i];

    // Live: a service made on node 1; Provision's step 1 on node 1, step 2 on node 2; the
    // token it gives works on node 3.
    let secrets = cluster.live_service("multi").await;
    let nonce = LiveClient::new(&node(0).live)
        .provision_nonce("multi", Scheme::Internal)
        .await
        .unwrap();
    let value = provision_value("multi", &secrets.admin_secret, &nonce);
    let provisioned = LiveClient::new(&node(1).live)
        .provision_with("multi", Scheme::Internal, &nonce, &value)
        .await
        .unwrap();
    let rooms = LiveClient::new(&node(2).live)
        .with_token(&provisioned.token)
        .list_rooms()
        .await
        .unwrap();
    assert!(rooms.is_empty());
    // The nonce was used up on node 2: node 3 refuses it too.
    let again = LiveClient::new(&node(2).live)
        .provision_with("multi", Scheme::Internal, &nonce, &value)
        .await;
    assert!(again.is_err(), "a nonce used twice: {again:?}");

    // Secrets rotated through node 2: from its answer on, node 3 takes only the new ones.
    let rotated = cluster.admin(1).rotate_live_secrets("multi").await.unwrap();
    let old = LiveClient::new(&node(2).live)
        .provision("multi", &secrets.admin_secret)
        .await;
    assert!(old.is_err(), "the old admin secret on node 3: {old:?}");
    LiveClient::new(&node(2).live)
        .provision("multi", &rotated.admin_secret)
        .await
        .unwrap();

    // Messaging: a token from node 1 sends through node 3; the client's secret rotated on
    // node 2 ends it on node 1 (which issued it) and node 3 (which has seen it) at once.
    let client = cluster
        .admin(0)
        .create_messaging_client(None)
        .await
        .unwrap();
    let token = MessagingClient::token(
        &node(0).url("messaging"),
        &client.client_id,
        &client.client_secret,
    )
    .await
    .unwrap()
    .access_token;
    for (i, cid) in [(2, "n3-before"), (0, "n1-before")] {
        let sent = MessagingClient::new(&node(i).url("messaging"), &token)
            .send_xms(&sms(cid, "821012345678"))
            .await;
        assert!(sent.is_ok(), "node {}: {sent:?}", i + 1);
    }
    let res = reqwest::Client::new()
        .post(format!(
            "{}/admin/v1/messaging/clients/{}/secret",
            node(1).admin,
            client.client_id
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    for i in [0, 2] {
        let sent = MessagingClient::new(&node(i).url("messaging"), &token)
            .send_xms(&sms(&format!("after-{i}"), "821012345678"))
            .await;
        assert!(sent.is_err(), "node {}: a revoked token: {sent:?}", i + 1);
    }
}

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
        let mut ids: Vec<_> = on(i)
            .list_participants("r")
            .await
            .unwrap()
            .participants
            .into_iter()
            .map(|p| p.participant_id)
            .collect();
        ids.sort();
        assert_eq!(ids, ["alice", "bob"], "node {}", i + 1);
    }

    // Kicked through node 1 (which has only Alice): Bob, on node 3, hears it and is gone.
    let missing = on(0).kick("r", &["bob".into(), "carol".into()]).await;
    assert!(missing.is_err(), "all targets or none: {missing:?}");
    on(0).kick("r", &["bob".into()]).await.unwrap();
    until_event(&mut bob, EventKind::Kicked).await;
    let ids: Vec<_> = on(1)
        .list_participants("r")
        .await
        .unwrap()
        .participants
        .into_iter()
        .map(|p| p.participant_id)
        .collect();
    assert_eq!(ids, ["alice"]);

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
    let published = until_event(&mut bob, EventKind::StreamPublished).await;
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

/// A message load spread over three nodes, one of them killed -9 in the middle: every
/// message any node accepted reaches a final status, whichever node delivers it.
#[tokio::test]
async fn a_node_killed_under_message_load_loses_no_message() {
    let mut cluster = Cluster::start(
        3,
        &[
            ("KEP_MESSAGING_DISPATCH_LEASE_S", "2"),
            // Slow enough that node 2 holds claims when it dies.
            ("KEP_SIMULATOR_DELAY_MS", "500"),
        ],
    );
    let client = cluster
        .admin(0)
        .create_messaging_client(None)
        .await
        .unwrap();
    let token = MessagingClient::token(
        &cluster.nodes[0].url("messaging"),
        &client.client_id,
        &client.client_secret,
    )
    .await
    .unwrap()
    .access_token;
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.url("messaging")).collect();
    let mut accepted = BTreeMap::new();
    for n in 0..600 {
        if n == 300 {
            // Node 2 dies with what it claimed and accepted in flight.
            let victim = &mut cluster.nodes[1].child;
            victim.kill().unwrap();
            victim.wait().unwrap();
        }
        let i = n % 3;
        let cid = format!("load-{n}");
        let sent = MessagingClient::new(&urls[i], &token)
            .send_xms(&sms(&cid, &format!("8210{:08}", 1000 + n)))
            .await;
        match sent {
            Ok(answer) => {
                accepted.insert(cid, answer.uid);
            }
            // Only node 2, once it is dead, may fail to answer.
            Err(e) => assert!(i == 1 && n >= 300, "send {n} to node {}: {e}", i + 1),
        }
    }
    assert!(accepted.len() >= 500, "{} accepted", accepted.len());

    // Read back through node 3: every accepted message is final (node 2's claims were taken
    // over once their lease ran out).
    let admin = cluster.admin(2);
    let (mut handed_twice, mut taken_over) = (0, 0);
    for uid in accepted.values() {
        let timeline = eventually(Duration::from_secs(60), "a final status", async || {
            let t = admin.message(uid).await.map_err(|e| e.to_string())?;
            if t.message.status == "100" {
                return Err(format!("{uid} still at 100"));
            }
            Ok(t)
        })
        .await;
        let handovers = timeline
            .timeline
            .iter()
            .filter(|s| s.carrier.is_some())
            .count();
        assert!(handovers >= 1, "{uid}: {timeline:?}");
        if handovers > 1 {
            handed_twice += 1;
        }
        if timeline.message.attempts > 1 {
            taken_over += 1;
        }
    }
    assert!(
        taken_over > 0,
        "node 2 died holding no claim: the test tested nothing"
    );
    // At least once: only what node 2 had handed over and not yet recorded may go twice.
    println!(
        "{} messages accepted, all final; {taken_over} taken over from node 2, \
         {handed_twice} handed over twice",
        accepted.len()
    );
}

/// Kills, when dropped, every process whose environment holds `marker`: the instances a
/// node killed -9 could not stop.
struct KillsInstances(String);

impl Drop for KillsInstances {
    fn drop(&mut self) {
        for pid in crate::crash_recovery::instance_processes(&self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The pids of the deployment's two instances once it is Available.
async fn available_pids(admin: AdminClient) -> Result<std::collections::BTreeSet<u32>, String> {
    let d = admin.deployment("moving", "app").await;
    let d = d.map_err(|e| e.to_string())?;
    let pids: std::collections::BTreeSet<u32> = d.instances.iter().filter_map(|i| i.pid).collect();
    if d.state == "Available" && pids.len() == 2 {
        Ok(pids)
    } else {
        Err(format!("{} {:?}", d.state, d.instances))
    }
}

/// What the endpoint's instance answered through `node`'s gateway: its pid.
async fn instance_pid(cluster: &Cluster, node: usize, key: &str) -> Result<u64, String> {
    let res = reqwest::Client::new()
        .get(format!(
            "{}/endpoints/moving/hello",
            cluster.nodes[node].url("gateway")
        ))
        .bearer_auth(key)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = res.status();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    match body["pid"].as_u64() {
        Some(pid) if status == 200 => Ok(pid),
        _ => Err(format!("{status} {body}")),
    }
}

/// The serving runtime runs on the one node that leads serving; management calls through
/// any node reach its instances, every node's gateway routes to them, and a key reissued
/// through one node is the only one every gateway takes. Killed -9, another node takes the
/// runtime over and starts the instances again, and the gateways answer again: the time
/// from the kill to the first good answer is printed (BENCHMARKS.md, `bench/failover.sh`).
#[tokio::test]
async fn serving_moves_to_another_node_when_its_node_is_killed() {
    let mut cluster = Cluster::start(3, &[]);
    let run = tempfile::tempdir().unwrap();
    let marker = format!("KEP_FAILOVER_RUN={}", run.path().display());
    let _instances = KillsInstances(marker.clone());
    let instance = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kep-serving/tests/instance.py")
        .canonicalize()
        .unwrap();
    let image = json!({"name": "py", "command": ["python3", instance]});
    cluster
        .admin(0)
        .create_image(&serde_json::from_value(image).unwrap())
        .await
        .unwrap();
    let endpoint = json!({"name": "moving", "instance_count": 2});
    let created = cluster
        .admin(1)
        .create_endpoint(&serde_json::from_value(endpoint).unwrap())
        .await
        .unwrap();
    let deployment = json!({"name": "app", "type": "custom-image", "image": "py",
        "env": {"KEP_FAILOVER_RUN": run.path().display().to_string()}});
    cluster
        .admin(2)
        .create_deployment("moving", &serde_json::from_value(deployment).unwrap())
        .await
        .unwrap();

    // Whichever node runs them, every node tells their state and routes to them.
    let pids = |node: usize| available_pids(cluster.admin(node));
    let first = eventually(Duration::from_secs(30), "Available", async || pids(2).await).await;
    assert_eq!(pids(0).await.unwrap(), first);
    assert_eq!(pids(1).await.unwrap(), first);
    let mut key = created.api_key.clone();
    for node in 0..3 {
        let pid = eventually(Duration::from_secs(10), "an answer", async || {
            instance_pid(&cluster, node, &key).await
        })
        .await;
        assert!(
            first.contains(&(pid as u32)),
            "node {node} answered from {pid}"
        );
    }

    // A key reissued through node 1: the old one stops working on node 3 at once.
    let reissued = cluster.admin(0).reissue_api_key("moving").await.unwrap();
    let refused = instance_pid(&cluster, 2, &key).await.unwrap_err();
    assert!(refused.starts_with("401"), "{refused}");
    key = reissued.api_key;
    instance_pid(&cluster, 2, &key).await.unwrap();

    let leader = serving_leader(&cluster).expect("a node leads serving");
    let survivor = (leader + 1) % 3;
    let victim = &mut cluster.nodes[leader].child;
    victim.kill().unwrap();
    victim.wait().unwrap();
    let killed = std::time::Instant::now();
    let mut answered = eventually(
        Duration::from_secs(30),
        "an answer after the kill",
        async || {
            let pid = instance_pid(&cluster, survivor, &key).await?;
            if first.contains(&(pid as u32)) {
                Err(format!("answered by {pid}, an instance of the killed node"))
            } else {
                Ok(pid)
            }
        },
    )
    .await;
    println!(
        "serving failover: {} ms from the kill to the first good answer",
        killed.elapsed().as_millis()
    );
    let second = eventually(Duration::from_secs(30), "Available again", async || {
        available_pids(cluster.admin(survivor)).await
    })
    .await;
    assert!(second.is_disjoint(&first), "{first:?} then {second:?}");
    assert!(second.contains(&(answered as u32)));
    let other = 3 - leader - survivor;
    answered = eventually(
        Duration::from_secs(10),
        "the third node routes",
        async || instance_pid(&cluster, other, &key).await,
    )
    .await;
    assert!(second.contains(&(answered as u32)));

    // Deleted through the node that does not run them: the new instances stop.
    cluster
        .admin(other)
        .delete_endpoint("moving")
        .await
        .unwrap();
    let running = crate::crash_recovery::instance_processes(&marker);
    assert!(
        second.iter().all(|p| !running.contains(&u64::from(*p))),
        "{second:?} still among {running:?}"
    );
}

/// The node that leads serving, by its log.
fn serving_leader(cluster: &Cluster) -> Option<usize> {
    (0..cluster.nodes.len()).find(|&n| {
        let log = cluster.nodes[n].logs();
        log.contains("leading") && log.contains("role=\"serving\"")
    })
}

/// Files kept through one node are read on another (CONTRACT §5): a model uploaded
/// through the node that does not run serving is served by the one that does, and a DRM
/// release of several chunks uploaded through one node is downloaded whole through the
/// other.
#[tokio::test]
async fn files_kept_through_one_node_are_read_on_another() {
    let cluster = Cluster::start(2, &[]);
    let client = reqwest::Client::new();
    let admin = |n: usize, path: &str| format!("{}{path}", cluster.nodes[n].admin);
    let leader = eventually(Duration::from_secs(10), "a serving leader", async || {
        serving_leader(&cluster).ok_or("none yet")
    })
    .await;
    let other = 1 - leader;

    // The model: uploaded and deployed through the other node, run by the leader.
    let models = tempfile::tempdir().unwrap();
    let _instances = KillsInstances(format!("KEP_FILES_RUN={}", models.path().display()));
    let made = std::process::Command::new("python3")
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../kep-model-server/tests/make_models.py"),
        )
        .arg(models.path())
        .status()
        .unwrap();
    assert!(made.success());
    let form = reqwest::multipart::Form::new()
        .text("name", "mlp")
        .text("framework", "pytorch")
        .part(
            "file",
            reqwest::multipart::Part::bytes(std::fs::read(models.path().join("mlp.onnx")).unwrap())
                .file_name("mlp.onnx"),
        );
    let res = client
        .post(admin(other, "/admin/v1/serving/models"))
        .bearer_auth(OPERATOR_TOKEN)
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let created = cluster
        .admin(other)
        .create_endpoint(&serde_json::from_value(json!({"name": "tri"})).unwrap())
        .await
        .unwrap();
    cluster
        .admin(other)
        .create_deployment(
            "tri",
            &serde_json::from_value(json!({"name": "d1", "type": "triton", "model": "mlp",
                "env": {"KEP_FILES_RUN": models.path().display().to_string()}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let infer = json!({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
        "data": [[1.0, 2.0, 3.0, 4.0]]}]});
    let answer = eventually(Duration::from_secs(60), "an inference", async || {
        let res = client
            .post(format!(
                "{}/endpoints/tri/v2/models/mlp/infer",
                cluster.nodes[other].url("gateway")
            ))
            .bearer_auth(&created.api_key)
            .json(&infer)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = res.status();
        let body: Value = res.json().await.unwrap_or(Value::Null);
        if status == 200 {
            Ok(body)
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await;
    assert_eq!(answer["outputs"][0]["shape"], json!([1, 3]));
    let leader_copy = cluster.nodes[leader].data_dir.join("serving/models");
    assert_eq!(std::fs::read_dir(leader_copy).unwrap().count(), 1);

    // The DRM release: 2.5 chunks, through node 1; the file through node 2.
    let operator = |path: &'static str, body: Value| {
        let req = client
            .post(admin(0, path))
            .bearer_auth(OPERATOR_TOKEN)
            .json(&body);
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let org = operator(
        "/admin/v1/adapter/org-login-types",
        json!({"method": "SAML2", "adapter_agent": "127.0.0.1:9"}),
    )
    .await;
    let session = operator(
        "/admin/v1/adapter/drm-requests",
        json!({"org_login_type_id": org["id"], "file_id": "f-1", "file_type": "DRM"}),
    )
    .await;
    let file: Vec<u8> = (0..5 * 1024 * 1024 / 2).map(|i| (i % 253) as u8).collect();
    let agent = |path: &str| {
        client
            .post(format!(
                "{}/api/trust/drm/v0/{path}",
                cluster.nodes[0].url("adapter")
            ))
            .header(
                "Authorization",
                format!("Secret {}", org["secret_key"].as_str().unwrap()),
            )
            .header("Kep-OrgLoginType", format!("ID {}", org["id"]))
            .header(
                "Kep-AgentSession",
                format!("DSID {}", session["session_id"].as_str().unwrap()),
            )
            .header("Kep-File-Id", "f-1")
    };
    let res = agent("uploadResult")
        .header("Kep-File-Type", "DRM")
        .json(&json!({"result": "SUCCESS", "reason": "several nodes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let part = reqwest::multipart::Part::bytes(file.clone()).file_name("f-1");
    let res = agent("uploadDecrypted")
        .multipart(reqwest::multipart::Form::new().part("file", part))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let res = client
        .get(admin(
            1,
            &format!(
                "/admin/v1/adapter/drm-requests/{}/file",
                session["session_id"].as_str().unwrap()
            ),
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let got = res.bytes().await.unwrap();
    assert!(got[..] == file[..], "the file read through node 2 differs");
}
