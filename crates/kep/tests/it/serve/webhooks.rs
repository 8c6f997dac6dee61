//! Live webhooks through `kep serve` and the CLI: room events written down before a kill -9
//! reach, after the restart, a receiver that was down all along, each signed, in order
//! per room, a participant's `left` after its `joined`.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::common::{
    Joiner, StopsGracefully, cli, eventually_blocking, port0, receive_webhooks, serve,
};

fn signed(secret: &str, signature: &str, body: &str) -> bool {
    let parts: Vec<(&str, &str)> = signature
        .split(',')
        .filter_map(|p| p.split_once('='))
        .collect();
    let (Some(t), Some(v1)) = (
        parts.iter().find(|p| p.0 == "t").map(|p| p.1),
        parts.iter().find(|p| p.0 == "v1").map(|p| p.1),
    ) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    hex::decode(v1).is_ok_and(|v| mac.verify_slice(&v).is_ok())
}

#[test]
fn webhook_events_outlive_a_kill_9_and_reach_a_receiver_that_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    // A port with nothing on it: the receiver is down until after the kill.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = [("KEP_LIVE_WEBHOOK_RETRY_MS", "50")];
    let first = serve(dir.path(), &port0(), &env);
    let service = cli(&first, &["live", "service", "create", "--id", "demo"]);
    let service_secret = service["serviceSecret"].as_str().unwrap().to_owned();
    let url = format!("http://127.0.0.1:{port}/hook");
    let hook = cli(&first, &["live", "webhook", "set", "demo", &url]);
    let secret = hook["secret"].as_str().unwrap().to_owned();

    let mut joined = Vec::new();
    for (room, who) in [("r1", "alice"), ("r2", "bob"), ("r1", "carol")] {
        let args = [
            room,
            "--service-id",
            "demo",
            "--service-secret",
            &service_secret,
        ];
        let joiner = Joiner::start(&first, &[&args[..], &["--participant-id", who]].concat());
        assert_eq!(joiner.next()["type"], "joined");
        joined.push(joiner);
    }
    // Each leave is written down before the next kill: kep notices disconnections in its
    // own order (CI once saw carol's before alice's), and the test wants a known one.
    for (mut joiner, who) in joined.into_iter().zip(["alice", "bob", "carol"]) {
        let _ = joiner.child.kill();
        let _ = joiner.child.wait();
        eventually_blocking(Duration::from_secs(20), "the leave written down", || {
            let list = cli(&first, &["live", "webhook", "deliveries", "demo"]);
            let left = list["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["body"]["action"] == "left" && d["body"]["participantId"] == who);
            if left { Ok(()) } else { Err(format!("{list}")) }
        });
    }
    // Opened, joined, left for each, closed: 10 events written down, each room's first
    // failing again and again (the others wait their turn).
    eventually_blocking(
        Duration::from_secs(20),
        "10 events written, the first tried",
        || {
            let list = cli(&first, &["live", "webhook", "deliveries", "demo"]);
            let deliveries = list["deliveries"].as_array().unwrap();
            let pending = deliveries
                .iter()
                .filter(|d| d["status"] == "pending")
                .count();
            let tried = deliveries
                .iter()
                .filter(|d| d["attempts"].as_i64() > Some(1))
                .count();
            if pending == 10 && tried == 2 {
                Ok(())
            } else {
                Err(format!("{list}"))
            }
        },
    );
    drop(first); // SIGKILL

    let taken = Arc::new(Mutex::new(Vec::new()));
    receive_webhooks(
        TcpListener::bind(("127.0.0.1", port)).unwrap(),
        Arc::clone(&taken),
    );
    let second = StopsGracefully(serve(dir.path(), &port0(), &env));
    let got = eventually_blocking(Duration::from_secs(30), "all 10 delivered", || {
        let got = taken.lock().unwrap().clone();
        if got.len() >= 10 {
            Ok(got)
        } else {
            Err(format!("{} delivered", got.len()))
        }
    });
    assert_eq!(got.len(), 10, "each once");
    for (signature, body) in &got {
        assert!(signed(&secret, signature, body), "{signature} {body}");
    }
    let events: Vec<Value> = got
        .iter()
        .map(|(_, b)| serde_json::from_str(b).unwrap())
        .collect();
    let steps = |room: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["roomId"] == room)
            .map(|e| {
                let what = e["action"].as_str().or(e["event"].as_str()).unwrap();
                format!("{what} {}", e["participantId"].as_str().unwrap_or(""))
            })
            .collect()
    };
    assert_eq!(
        steps("r1"),
        [
            "Room.OnRoomOpened ",
            "joined alice",
            "joined carol",
            "left alice",
            "left carol",
            "Room.OnRoomClosed "
        ]
    );
    assert_eq!(
        steps("r2"),
        [
            "Room.OnRoomOpened ",
            "joined bob",
            "left bob",
            "Room.OnRoomClosed "
        ]
    );
    let list = cli(&second.0, &["live", "webhook", "deliveries", "demo"]);
    assert!(
        list["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["status"] == "delivered"),
        "{list}"
    );
}
