//! The operator API of the live service.

use kep_api::live::{CreateServiceRequest, EventKind};
use kep_client::ClientError;
use kep_client::live::LiveClient;
use serde_json::{Value, json};

use crate::common::{
    OPERATOR_TOKEN, TestServer, expect_event, expect_quiet, next, rpc_code, spawn,
};

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
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(dup, ClientError::Api { status: 409, .. }));
    let bad = srv
        .admin
        .create_live_service(&CreateServiceRequest {
            service_id: Some("no:colons".into()),
            external_verifier_url: None,
            ..Default::default()
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
        .bearer_auth(OPERATOR_TOKEN)
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
            .bearer_auth(OPERATOR_TOKEN)
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
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let answer: Value = res.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "invalid_path", "{answer}");
}

/// A refused operator call: its status and `error` object.
fn api_error(e: ClientError) -> (u16, Value) {
    match e {
        ClientError::Api { status, body } => {
            let body: Value = serde_json::from_str(&body).unwrap();
            (status, body["error"].clone())
        }
        other => panic!("expected an HTTP error, got {other}"),
    }
}

/// The room ids the operator sees in the service.
async fn room_ids(srv: &TestServer, service: &str) -> Vec<String> {
    let list = srv.admin.live_rooms(service).await.unwrap();
    list.rooms.into_iter().map(|r| r.room_id).collect()
}

#[tokio::test]
async fn the_operator_lists_rooms_with_their_participants_and_streams() {
    let srv = spawn(|_| {}).await;
    let s = srv.create_service("svc").await;
    let other = srv.create_service("other").await;
    assert_eq!(
        serde_json::to_value(srv.admin.live_rooms("svc").await.unwrap()).unwrap(),
        json!({"rooms": []})
    );
    let _a = srv.join(&s, "room-b", "a").await;
    let mut b = srv.join(&s, "room-a", "b").await;
    let sid = b.publish().await.unwrap();
    let _z = srv.join(&other, "elsewhere", "z").await;
    assert_eq!(
        serde_json::to_value(srv.admin.live_rooms("svc").await.unwrap()).unwrap(),
        json!({"rooms": [
            {"roomId": "room-a", "participants": [{"participantId": "b", "streams": [{"streamId": sid}]}]},
            {"roomId": "room-b", "participants": [{"participantId": "a", "streams": []}]},
        ]}),
        "by id, only this service's"
    );
    let (status, error) = api_error(srv.admin.live_rooms("ghost").await.unwrap_err());
    assert_eq!((status, error["code"].as_str()), (404, Some("not_found")));
}

#[tokio::test]
async fn the_operator_kicks_participants_all_or_none() {
    let srv = spawn(|_| {}).await;
    let s = srv.create_service("svc").await;
    let mut a = srv.join(&s, "room", "a").await;
    let mut b = srv.join(&s, "room", "b").await;
    expect_event(&mut a, EventKind::ParticipantJoined).await;

    let e = srv
        .admin
        .kick_live_participants("svc", "room", &["b".into(), "ghost".into()])
        .await
        .unwrap_err();
    let (status, error) = api_error(e);
    assert_eq!((status, error["code"].as_str()), (404, Some("not_found")));
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("ghost") && !message.contains("\"b\""),
        "{message}"
    );
    expect_quiet(&mut b).await;

    srv.admin
        .kick_live_participants("svc", "room", &["b".into()])
        .await
        .unwrap();
    assert_eq!(
        expect_event(&mut b, EventKind::Kicked).await.0.as_deref(),
        Some("b")
    );
    let closed = next(&mut b).await.unwrap_err();
    assert_eq!((closed.code, closed.reason.as_str()), (1008, "kicked"));
    expect_event(&mut a, EventKind::ParticipantLeft).await;
    assert_eq!(room_ids(&srv, "svc").await, ["room"]);

    // The last one out: the room ends with it (no empty-room grace here).
    srv.admin
        .kick_live_participants("svc", "room", &["a".into()])
        .await
        .unwrap();
    expect_event(&mut a, EventKind::Kicked).await;
    assert!(room_ids(&srv, "svc").await.is_empty());
}

#[tokio::test]
async fn the_operator_inactivates_streams_all_or_none() {
    let srv = spawn(|_| {}).await;
    let s = srv.create_service("svc").await;
    let mut a = srv.join(&s, "room", "a").await;
    let sid = a.publish().await.unwrap();
    let streams = async || {
        let list = srv.admin.live_rooms("svc").await.unwrap();
        list.rooms[0].participants[0].streams.len()
    };

    let e = srv
        .admin
        .inactivate_live_streams("svc", "room", &[("a".into(), sid), ("a".into(), 999)])
        .await
        .unwrap_err();
    let (status, error) = api_error(e);
    assert_eq!((status, error["code"].as_str()), (404, Some("not_found")));
    assert!(
        error["message"].as_str().unwrap().contains("999"),
        "{error}"
    );
    expect_quiet(&mut a).await;
    assert_eq!(streams().await, 1, "nothing was done");

    srv.admin
        .inactivate_live_streams("svc", "room", &[("a".into(), sid)])
        .await
        .unwrap();
    assert_eq!(
        expect_event(&mut a, EventKind::InactivatedStream).await,
        (Some("a".into()), Some(sid))
    );
    assert_eq!(streams().await, 0);
}

#[tokio::test]
async fn the_operator_destroys_a_room() {
    let srv = spawn(|_| {}).await;
    let s = srv.create_service("svc").await;
    let mut a = srv.join(&s, "room", "a").await;
    let _z = srv.join(&s, "other-room", "z").await;
    srv.admin.destroy_live_room("svc", "room").await.unwrap();
    expect_event(&mut a, EventKind::RoomDestroyed).await;
    assert_eq!(next(&mut a).await.unwrap_err().reason, "room destroyed");
    assert_eq!(room_ids(&srv, "svc").await, ["other-room"]);
    let (status, _) = api_error(
        srv.admin
            .destroy_live_room("svc", "room")
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 404);
}

#[tokio::test]
async fn room_routes_answer_404_for_an_unknown_service_room_or_target() {
    let srv = spawn(|_| {}).await;
    let s = srv.create_service("svc").await;
    let _a = srv.join(&s, "room", "a").await;
    let p = ["a".to_owned()];
    let stream = [("a".to_owned(), 1)];
    let admin = &srv.admin;
    for (service, room) in [("ghost", "room"), ("svc", "nowhere")] {
        let errors = [
            admin.destroy_live_room(service, room).await.unwrap_err(),
            admin
                .kick_live_participants(service, room, &p)
                .await
                .unwrap_err(),
            admin
                .inactivate_live_streams(service, room, &stream)
                .await
                .unwrap_err(),
        ];
        for e in errors {
            let (status, error) = api_error(e);
            assert_eq!(
                (status, error["code"].as_str()),
                (404, Some("not_found")),
                "{service}/{room}: {error}"
            );
        }
    }
    // A stream the participant never published.
    let (status, _) = api_error(
        admin
            .inactivate_live_streams("svc", "room", &stream)
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 404);
    assert_eq!(room_ids(&srv, "svc").await, ["room"], "untouched");
}

#[tokio::test]
async fn room_targets_are_1_to_the_maximum() {
    let srv = spawn(|s| s.max_targets = 3).await;
    let s = srv.create_service("svc").await;
    let names = ["a", "b", "c", "d"];
    let mut joined = Vec::new();
    for pid in names {
        joined.push(srv.join(&s, "room", pid).await);
    }
    let ids = |n: usize| names[..n].iter().map(|p| p.to_string()).collect::<Vec<_>>();
    let streams = |n: usize| ids(n).into_iter().map(|p| (p, 1)).collect::<Vec<_>>();
    let admin = &srv.admin;
    for n in [0, 4] {
        let errors = [
            admin
                .kick_live_participants("svc", "room", &ids(n))
                .await
                .unwrap_err(),
            admin
                .inactivate_live_streams("svc", "room", &streams(n))
                .await
                .unwrap_err(),
        ];
        for e in errors {
            let (status, error) = api_error(e);
            assert_eq!(
                (status, error["code"].as_str(), error["field"].as_str()),
                (400, Some("invalid_field"), Some("targets")),
                "{n} targets: {error}"
            );
        }
    }
    // Duplicates count once: four naming three participants are three.
    let mut dup = ids(3);
    dup.push("a".into());
    admin
        .kick_live_participants("svc", "room", &dup)
        .await
        .unwrap();
    // The maximum passes the check (and then misses: no one published stream 1).
    let (status, _) = api_error(
        admin
            .inactivate_live_streams("svc", "room", &streams(3))
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 404);
    let listed = admin.live_rooms("svc").await.unwrap();
    let left: Vec<_> = listed.rooms[0]
        .participants
        .iter()
        .map(|p| p.participant_id.as_str())
        .collect();
    assert_eq!(left, ["d"]);
}

/// A service made with the secrets the operator gives (a CI's fixed ones) answers to them;
/// each is 8 to 256 printable characters, checked at, below and above, and a refused one
/// makes nothing.
#[tokio::test]
async fn a_service_takes_the_secrets_it_is_given() {
    let srv = spawn(|_| {}).await;
    let create = |id: &str, admin: String, service: String| CreateServiceRequest {
        service_id: Some(id.into()),
        admin_secret: Some(admin),
        service_secret: Some(service),
        ..Default::default()
    };
    for (admin, service, field) in [
        ("a".repeat(7), "s".repeat(8), "adminSecret"),
        ("a".repeat(257), "s".repeat(8), "adminSecret"),
        ("a".repeat(8), "tab\there!".to_owned(), "serviceSecret"),
    ] {
        let e = srv
            .admin
            .create_live_service(&create("given", admin, service))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ClientError::Api { status: 400, body } if body.contains(field)),
            "{e}"
        );
    }
    assert!(srv.admin.list_live_services().await.unwrap().is_empty());

    let longest = "x".repeat(256);
    let made = srv
        .admin
        .create_live_service(&create("given", "admin secret".into(), longest.clone()))
        .await
        .unwrap();
    assert_eq!(
        (made.admin_secret.as_str(), made.service_secret.as_str()),
        ("admin secret", longest.as_str())
    );
    LiveClient::new(&srv.live_url)
        .provision("given", "admin secret")
        .await
        .unwrap();
    let shortest = create("shortest", "8 chars!".into(), "s".repeat(8));
    srv.admin.create_live_service(&shortest).await.unwrap();
}
