//! Nodes on one database tell each other what changed and ask each other, over
//! `LISTEN`/`NOTIFY`; a node that left is not waited for.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kep_core::cluster::{CallError, Cluster};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

struct Node {
    cluster: Cluster,
    stop: CancellationToken,
    tasks: TaskTracker,
    /// What other nodes told it.
    told: Arc<Mutex<Vec<String>>>,
}

impl Node {
    async fn join(url: &str) -> Node {
        let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
        let cluster = Cluster::join(url, stop.clone(), &tasks).await.unwrap();
        let told = Arc::new(Mutex::new(Vec::new()));
        let seen = told.clone();
        cluster.handle(
            "test.changed",
            Arc::new(move |body| {
                seen.lock().unwrap().push(body);
                Box::pin(std::future::ready(Ok(String::new())))
            }),
        );
        let id = cluster.node_id().unwrap().to_owned();
        cluster.handle(
            "test.echo",
            Arc::new(move |body| {
                let answer = if body == "refuse" {
                    Err("refused".to_owned())
                } else {
                    Ok(format!("{id}: {body}"))
                };
                Box::pin(std::future::ready(answer))
            }),
        );
        Node {
            cluster,
            stop,
            tasks,
            told,
        }
    }

    async fn leave(self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

#[tokio::test]
async fn nodes_tell_each_other_and_ask_each_other() {
    let Some(url) = kep_testkit::database_for_a_test().await else {
        eprintln!("no KEP_TEST_DATABASE_URL: nothing to test against");
        return;
    };
    let (a, b, c) = (
        Node::join(&url).await,
        Node::join(&url).await,
        Node::join(&url).await,
    );
    let mut up = a.cluster.nodes().await.unwrap();
    up.sort();
    let mut ids: Vec<String> = [&a, &b, &c]
        .iter()
        .map(|n| n.cluster.node_id().unwrap().to_owned())
        .collect();
    ids.sort();
    assert_eq!(up, ids);

    // A broadcast returns once every other node has taken it: nothing to wait for after.
    a.cluster.broadcast("test.changed", "k1").await.unwrap();
    assert_eq!(*b.told.lock().unwrap(), ["k1"]);
    assert_eq!(*c.told.lock().unwrap(), ["k1"]);
    assert!(a.told.lock().unwrap().is_empty(), "not told itself");

    // A call goes to the one node named.
    let c_id = c.cluster.node_id().unwrap().to_owned();
    let reply = a.cluster.call(&c_id, "test.echo", "hi").await.unwrap();
    assert_eq!(reply, format!("{c_id}: hi"));
    let refused = a.cluster.call(&c_id, "test.echo", "refuse").await;
    assert!(
        matches!(&refused, Err(CallError::Refused { reason, .. }) if reason == "refused"),
        "{refused:?}"
    );
    let unknown = a.cluster.call(&c_id, "test.nothing", "").await;
    assert!(
        matches!(unknown, Err(CallError::Refused { .. })),
        "{unknown:?}"
    );
    // More than NOTIFY carries, both ways: stored and named.
    let large = "x".repeat(20_000);
    let reply = a.cluster.call(&c_id, "test.echo", &large).await.unwrap();
    assert_eq!(reply, format!("{c_id}: {large}"));
    let mut from: Vec<_> = a
        .cluster
        .gather("test.echo", "all")
        .await
        .unwrap()
        .into_iter()
        .map(|(n, r)| (n, r.unwrap()))
        .collect();
    from.sort();
    let b_id = b.cluster.node_id().unwrap().to_owned();
    let mut expected = vec![
        (b_id.clone(), format!("{b_id}: all")),
        (c_id.clone(), format!("{c_id}: all")),
    ];
    expected.sort();
    assert_eq!(from, expected);

    // A node that left is gone from the list at once, and nobody waits for it.
    c.leave().await;
    assert_eq!(a.cluster.nodes().await.unwrap().len(), 2);
    let started = Instant::now();
    b.cluster.broadcast("test.changed", "k2").await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(*a.told.lock().unwrap(), ["k2"]);
    let gone = a.cluster.call(&c_id, "test.echo", "hi").await;
    assert!(matches!(gone, Err(CallError::NoReply(_))), "{gone:?}");
    a.leave().await;
    b.leave().await;
}

/// One node at a time leads a role; when it leaves, another takes the lead, and `leader`
/// names whoever leads.
#[tokio::test]
async fn one_node_leads_and_another_takes_over_when_it_leaves() {
    let Some(url) = kep_testkit::database_for_a_test().await else {
        return;
    };
    let nodes = [Node::join(&url).await, Node::join(&url).await];
    let mut leading: Vec<_> = nodes.iter().map(|n| n.cluster.elect("test")).collect();
    let leads = |w: &[tokio::sync::watch::Receiver<bool>]| -> Vec<bool> {
        w.iter().map(|l| *l.borrow()).collect()
    };
    let started = Instant::now();
    while !leads(&leading).contains(&true) {
        assert!(started.elapsed() < Duration::from_secs(5), "nobody leads");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A second look: the other has tried the lock meanwhile and still does not lead.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let now = leads(&leading);
    assert_eq!(now.iter().filter(|l| **l).count(), 1, "{now:?}");
    let first = now.iter().position(|l| *l).unwrap();
    let first_id = nodes[first].cluster.node_id().unwrap().to_owned();
    assert_eq!(
        nodes[1 - first].cluster.leader("test").await.unwrap(),
        Some(first_id)
    );

    let [a, b] = nodes;
    let (gone, stays) = if first == 0 { (a, b) } else { (b, a) };
    let stays_id = stays.cluster.node_id().unwrap().to_owned();
    gone.leave().await;
    let mut next = leading.remove(1 - first);
    tokio::time::timeout(Duration::from_secs(5), next.wait_for(|l| *l))
        .await
        .expect("the other node takes the lead")
        .unwrap();
    assert_eq!(stays.cluster.leader("test").await.unwrap(), Some(stays_id));
    stays.leave().await;
}

/// A file kept through one node is whole on another, a chunk at a time, across chunk
/// boundaries (at, under and over one chunk); an empty file is a file; a removed one is
/// nowhere, and a copy a node already has is left alone.
#[tokio::test]
async fn files_kept_through_one_node_are_read_on_another() {
    let Some(url) = kep_testkit::database_for_a_test().await else {
        return;
    };
    let (a, b) = (Node::join(&url).await, Node::join(&url).await);
    let (here, there) = (a.cluster.files("test"), b.cluster.files("test"));
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    const CHUNK: usize = kep_core::cluster::files::CHUNK;
    for (name, len) in [
        ("empty", 0),
        ("under", CHUNK - 1),
        ("at", CHUNK),
        ("over", 2 * CHUNK + 1),
    ] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let source = dirs.0.path().join(name);
        std::fs::write(&source, &bytes).unwrap();
        here.publish(name, &source).await.unwrap();
        let copy = dirs.1.path().join("sub").join(name);
        assert!(there.fetch(name, &copy).await.unwrap(), "{name}");
        assert!(std::fs::read(&copy).unwrap() == bytes, "{name} differs");
    }
    here.remove("over").await.unwrap();
    let elsewhere = dirs.1.path().join("over-again");
    assert!(!there.fetch("over", &elsewhere).await.unwrap());
    assert!(!elsewhere.exists());
    // What a node has is used as it is.
    assert!(
        there
            .fetch("over", &dirs.1.path().join("sub/over"))
            .await
            .unwrap()
    );
    a.leave().await;
    b.leave().await;
}

/// A cluster lock is held by one node at a time: another node's wait ends when it is let
/// go, by a drop or by the holder's death (its connection closes either way).
#[tokio::test]
async fn a_lock_is_held_by_one_node_at_a_time() {
    let Some(url) = kep_testkit::database_for_a_test().await else {
        return;
    };
    let (a, b) = (Node::join(&url).await, Node::join(&url).await);
    let held = a.cluster.lock("test").await.unwrap();
    let other = b.cluster.clone();
    let waiting = tokio::spawn(async move { other.lock("test").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "taken while held");
    drop(held);
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("taken once let go")
        .unwrap()
        .unwrap();
    a.leave().await;
    b.leave().await;
}
