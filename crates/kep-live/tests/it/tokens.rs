//! Join tokens: a JWT a customer's server mints with its service secret lets a participant
//! in without that secret; a bad, expired or other-service token is refused as a bad value.

use std::time::Duration;

use kep_api::live::{ClientMessage, EventKind, JoinClaims, ServerMessage};
use kep_client::ClientError;
use kep_client::live::{Participant, join_token};

use crate::common::{expect_event, next, spawn};

fn claims(service: &str, room: &str, who: &str, exp: i64) -> JoinClaims {
    JoinClaims {
        iss: service.into(),
        room: room.into(),
        sub: who.into(),
        exp,
        publish: None,
        subscribe: None,
    }
}

/// A refused join: the error's code and reason.
fn refused(r: Result<Participant, ClientError>) -> (i64, String) {
    match r {
        Err(ClientError::Rpc(e)) => (e.code, e.data.unwrap_or_default()["reason"].to_string()),
        Err(other) => panic!("expected an error message, got {other}"),
        Ok(p) => panic!("joined as {}", p.participant_id),
    }
}

#[tokio::test]
async fn a_join_token_lets_its_participant_into_its_room() {
    let srv = spawn(|_| {}).await;
    let s = srv.create_service("svc").await;
    let now = srv.clock.unix_s();
    let mut first = srv.join(&s, "room", "first").await;
    let token = join_token(
        "svc",
        &s.service_secret,
        &claims("svc", "room", "alice", now + 60),
    );
    let mut alice = Participant::join_with_token(&srv.live_url, &token)
        .await
        .unwrap();
    assert_eq!(alice.participant_id, "alice");
    let ServerMessage::Joined { room_id, .. } = &alice.joined else {
        panic!("{:?}", alice.joined)
    };
    assert_eq!(room_id, "room");
    let (who, _) = expect_event(&mut first, EventKind::ParticipantJoined).await;
    assert_eq!(who.as_deref(), Some("alice"));
    // Publishing is allowed by default.
    alice.send(&ClientMessage::Publish).await.unwrap();
    assert!(matches!(
        next(&mut alice).await,
        Ok(ServerMessage::Published { .. })
    ));

    // `publish: false`: in, but a publish is refused and the socket stays open.
    let mut viewer = claims("svc", "room", "viewer", now + 60);
    viewer.publish = Some(false);
    let token = join_token("svc", &s.service_secret, &viewer);
    let mut viewer = Participant::join_with_token(&srv.live_url, &token)
        .await
        .unwrap();
    viewer.send(&ClientMessage::Publish).await.unwrap();
    match next(&mut viewer).await {
        Ok(ServerMessage::Error { code, .. }) => assert_eq!(code, -11002),
        other => panic!("expected an error, got {other:?}"),
    }
    viewer.send(&ClientMessage::Leave).await.unwrap();
}

/// Until its signature is verified a token gets one answer, whatever was wrong with it: a
/// forged token tells no stranger whether the service it names exists, on the socket and
/// on WHIP alike.
#[tokio::test]
async fn forged_tokens_of_missing_and_existing_services_get_one_answer() {
    let srv = spawn(|_| {}).await;
    srv.create_service("svc").await;
    let now = srv.clock.unix_s();
    let forged = |service: &str| {
        join_token(
            service,
            "a-guessed-secret",
            &claims(service, "room", "a", now + 60),
        )
    };
    let tokens = [forged("svc"), forged("ghost"), "not-a-token".to_owned()];
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for token in &tokens {
        let on_socket = match Participant::join_with_token(&srv.live_url, token).await {
            Err(ClientError::Rpc(e)) => format!("{} {} {:?}", e.code, e.message, e.data),
            other => panic!(
                "expected a refusal, got {:?}",
                other.map(|p| p.participant_id)
            ),
        };
        let res = http
            .post(format!("{}/api/whip/room", srv.live_url))
            .bearer_auth(token)
            .header("content-type", "application/sdp")
            .body("v=0\r\n")
            .send()
            .await
            .unwrap();
        let on_whip = format!("{} {}", res.status(), res.text().await.unwrap());
        answers.push((on_socket, on_whip));
    }
    assert!(answers[0].1.starts_with("401 "), "{answers:?}");
    assert!(answers.iter().all(|a| *a == answers[0]), "{answers:#?}");
}

#[tokio::test]
async fn bad_expired_and_other_service_tokens_are_refused() {
    let srv = spawn(|_| {}).await;
    let s = srv.create_service("svc").await;
    let other = srv.create_service("other").await;
    let now = srv.clock.unix_s();
    let good = claims("svc", "room", "alice", now + 60);
    let cases = [
        ("not a JWT at all", "not-a-token".to_owned()),
        // Signed with another service's secret, naming this one.
        ("wrong key", join_token("svc", &other.service_secret, &good)),
        // Another service's genuine token is no token of this one's: it names its issuer.
        (
            "unknown service",
            join_token(
                "ghost",
                &s.service_secret,
                &claims("ghost", "room", "a", now + 60),
            ),
        ),
        (
            "expired",
            join_token("svc", &s.service_secret, &claims("svc", "room", "a", now)),
        ),
        (
            "bad room id",
            join_token("svc", &s.service_secret, &claims("svc", "", "a", now + 60)),
        ),
    ];
    for (what, token) in cases {
        let (code, reason) = refused(Participant::join_with_token(&srv.live_url, &token).await);
        assert_eq!(
            code,
            if what == "bad room id" {
                -32602
            } else {
                -11002
            },
            "{what}: {reason}"
        );
    }
    // Valid now, expired once the service's clock passes `exp`.
    let token = join_token("svc", &s.service_secret, &good);
    srv.clock.advance(Duration::from_secs(60));
    let (code, reason) = refused(Participant::join_with_token(&srv.live_url, &token).await);
    assert_eq!((code, reason.as_str()), (-11002, "\"expired\""));
    // A join naming another room than its token's is refused.
    let token = join_token(
        "svc",
        &s.service_secret,
        &claims("svc", "room", "a", now + 600),
    );
    let mixed = ClientMessage::Join(kep_api::live::Join {
        room_id: Some("elsewhere".into()),
        token: Some(token),
        ..Default::default()
    });
    let url = srv.live_url.replacen("http", "ws", 1) + "/api/ws";
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    use futures_util::{SinkExt as _, StreamExt as _};
    ws.next().await.unwrap().unwrap();
    ws.send(tokio_tungstenite::tungstenite::Message::text(
        serde_json::to_string(&mixed).unwrap(),
    ))
    .await
    .unwrap();
    let answer = ws.next().await.unwrap().unwrap().into_text().unwrap();
    assert!(
        answer.contains("-11002") && answer.contains("roomId"),
        "{answer}"
    );
}
