//! The platform's activity stream, as an operator watches it (`GET /admin/v1/events`):
//! each change of a live service and its rooms is an event, in the order it happened,
//! naming the ids of its object (`serviceId`, `roomId`, `participantId`).

use std::time::Duration;

use futures_util::StreamExt as _;
use kep_client::activity::{Watch, Watched};

use crate::common::spawn;

#[tokio::test]
async fn every_change_of_a_room_is_an_activity_event_in_order() {
    let srv = spawn(|s| s.empty_room_grace_s = 0).await;
    let watch = Watch {
        service: Some("live".into()),
        ..Watch::default()
    };
    let events = srv.admin.events(&watch).await.unwrap();
    let (s, rooms) = srv.room_client("demo").await;
    let stream = srv.room_story(&s, &rooms).await;

    let mut events = events;
    let mut seen = Vec::new();
    while seen.len() < 13 {
        let next = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
        match next.expect("the next event within 10 s").unwrap().unwrap() {
            Watched::Event(e) => {
                // Its ids, each by its name, are its object's.
                let ids = [&e.ids.service_id, &e.ids.room_id, &e.ids.participant_id];
                let named: Vec<&str> = ids.iter().filter_map(|i| i.as_deref()).collect();
                assert_eq!((named.join("/"), &e.kind), (e.object.clone(), &e.event));
                seen.push((e.event, e.object, e.detail));
            }
            Watched::Lagged(n) => panic!("lagged by {n}"),
        }
    }
    let names: Vec<(&str, &str)> = seen
        .iter()
        .map(|(e, o, _)| (e.as_str(), o.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("service.created", "demo"),
            ("room.opened", "demo/lobby"),
            ("participant.joined", "demo/lobby/alice"),
            ("participant.joined", "demo/lobby/bob"),
            ("stream.published", "demo/lobby/alice"),
            ("stream.inactivated", "demo/lobby/alice"),
            ("participant.kicked", "demo/lobby/bob"),
            ("room.opened", "demo/hall"),
            ("participant.joined", "demo/hall/carol"),
            ("participant.left", "demo/hall/carol"),
            ("room.closed", "demo/hall"),
            ("participant.left", "demo/lobby/alice"),
            ("room.closed", "demo/lobby"),
        ]
    );
    assert_eq!(seen[4].2["streamId"], stream);
    assert_eq!(seen[9].2["reason"], "destroyed", "everyone leaves first");
    assert_eq!(seen[10].2["reason"], "destroyed");
    assert_eq!(seen[12].2["reason"], "empty");

    // A watcher that comes later gets the kept events of its filter, then resumes after
    // the id it was given.
    let watch = Watch {
        object: Some("demo/hall".into()),
        ..Watch::default()
    };
    let kept: Vec<_> = srv
        .admin
        .events(&watch)
        .await
        .unwrap()
        .take(4)
        .collect()
        .await;
    let kept: Vec<_> = kept
        .into_iter()
        .map(|w| match w.unwrap() {
            Watched::Event(e) => e,
            Watched::Lagged(n) => panic!("lagged by {n}"),
        })
        .collect();
    let names: Vec<&str> = kept.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        names,
        [
            "room.opened",
            "participant.joined",
            "participant.left",
            "room.closed"
        ]
    );
    let after = Watch {
        after: Some(kept[2].id),
        ..watch
    };
    let mut resumed = srv.admin.events(&after).await.unwrap();
    match resumed.next().await.unwrap().unwrap() {
        Watched::Event(e) => assert_eq!(e, kept[3]),
        Watched::Lagged(n) => panic!("lagged by {n}"),
    }
}

#[tokio::test]
async fn the_activity_stream_needs_the_operator_token() {
    let srv = spawn(|_| {}).await;
    let stranger = kep_client::AdminClient::new(srv.admin.base_url(), "wrong");
    let refused = stranger.events(&Watch::default()).await.err().unwrap();
    assert!(
        matches!(refused, kep_client::ClientError::Api { status: 401, .. }),
        "{refused}"
    );
}
