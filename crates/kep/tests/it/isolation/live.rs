//! Live streaming: two services, B's rooms and participants, and every room call, Provision
//! and join with A's credentials.

use std::time::Duration;

use kep_api::live::JoinClaims;
use kep_api::live::{ClientMessage, EventKind, ServerMessage, provision_value};
use kep_client::ClientError;
use kep_client::live::{Participant, join_token};
use serde_json::{Value, json};

use super::harness::*;

pub const ROOM: &str = "b-only-room";
pub const SHARED: &str = "shared-room";

pub fn rpc(id: u8, method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
}

pub fn rpc_error(id: u8, error: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#)
}

pub struct LiveTenant {
    pub service: String,
    pub admin_secret: String,
    pub service_secret: String,
    pub token: String,
}

/// Provision's two steps, as a customer's server makes them: the token, or the refusal.
pub fn provision(ctx: &Ctx, service: &str, admin_secret: &str) -> Answer {
    let url = ctx.url("live", "/api/rpc");
    let post = |body: String| {
        Answer::of(
            ctx.client
                .post(&url)
                .header("content-type", "application/json")
                .body(body),
        )
    };
    let params = json!({"serviceId": service, "scheme": "internal"});
    let step1 = post(rpc(1, "Provision", &params.to_string()));
    let nonce = step1.json()["error"]["data"]["nonce"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut params = params;
    params["auth"] = json!({
        "nonce": nonce, "key": service, "value": provision_value(service, admin_secret, &nonce),
    });
    post(rpc(2, "Provision", &params.to_string()))
}

pub fn live_tenant(ctx: &Ctx, service: &str) -> LiveTenant {
    let made = ctx.admin(
        "POST",
        "/admin/v1/live/services",
        Some(json!({"serviceId": service})),
    );
    let secret = |k: &str| made[k].as_str().unwrap().to_owned();
    let admin_secret = secret("adminSecret");
    let token = provision(ctx, service, &admin_secret).json()["result"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    LiveTenant {
        service: service.to_owned(),
        service_secret: secret("serviceSecret"),
        admin_secret,
        token,
    }
}

/// B's participants: two in a room only B has, one in a room whose name A also uses.
pub struct Rooms {
    pub rt: tokio::runtime::Runtime,
    pub b: [Participant; 3],
    pub streams: [i64; 3],
    pub _a: Participant,
}

impl Rooms {
    pub fn new(ctx: &Ctx, a: &LiveTenant, b: &LiveTenant) -> Self {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let live = ctx.srv.live.clone();
        let join = |t: &LiveTenant, room: &str, p: &str| {
            rt.block_on(Participant::join(
                &live,
                &t.service,
                &t.service_secret,
                room,
                Some(p),
            ))
            .unwrap()
        };
        let mut b1 = join(b, ROOM, "b-part-one");
        let mut b2 = join(b, ROOM, "b-part-two");
        let mut b3 = join(b, SHARED, "b-part-three");
        let streams = [
            rt.block_on(b1.publish()).unwrap(),
            rt.block_on(b2.publish()).unwrap(),
            rt.block_on(b3.publish()).unwrap(),
        ];
        // b1 has b2's stream still to read; then every socket is read to the end.
        let published = rt.block_on(next_event(&mut b1));
        assert_eq!(
            (published.event, published.stream_id),
            (EventKind::StreamPublished, Some(streams[1]))
        );
        let a1 = join(a, SHARED, "a-part-one");
        let ServerMessage::Joined { participants, .. } = &a1.joined else {
            unreachable!()
        };
        let seen: Vec<&str> = participants
            .iter()
            .map(|p| p.participant_id.as_str())
            .collect();
        assert_eq!(
            seen,
            ["a-part-one"],
            "A's room of the same name is A's alone"
        );
        Rooms {
            rt,
            b: [b1, b2, b3],
            streams,
            _a: a1,
        }
    }

    /// Each of B's participants publishes once more, and the others of its room hear it:
    /// each must see exactly that first, so no event of A's calls (a kick, a stopped
    /// stream, a destroyed room, A's join) ever reached them.
    pub fn nothing_reached_b(&mut self) {
        for (speaker, listener) in [(0, Some(1)), (1, Some(0)), (2, None)] {
            let p = &mut self.b[speaker];
            let stream = self.rt.block_on(async {
                p.send(&ClientMessage::Publish).await.unwrap();
                match p.next().await.unwrap() {
                    Ok(ServerMessage::Published { stream_id }) => stream_id,
                    other => panic!("{}: {other:?} before its own publish", p.participant_id),
                }
            });
            if let Some(l) = listener {
                let heard = self.rt.block_on(next_event(&mut self.b[l]));
                assert_eq!(
                    (heard.event, heard.stream_id),
                    (EventKind::StreamPublished, Some(stream)),
                    "{}: the first event since the matrix",
                    self.b[l].participant_id
                );
            }
        }
    }
}

pub async fn next_event(p: &mut Participant) -> kep_api::live::Event {
    let next = tokio::time::timeout(Duration::from_secs(30), p.next())
        .await
        .expect("an event within 30 s")
        .unwrap();
    match next {
        Ok(ServerMessage::Event(e)) => e,
        other => panic!("{}: expected an event, got {other:?}", p.participant_id),
    }
}

/// A `Room.*` call with the params given (a template).
pub fn room_call<'a>(ctx: &'a Ctx, method: &str, params: &str) -> Send<'a> {
    let body = Body::Json(rpc(1, method, params));
    ctx.send("Bearer", "POST", ctx.url("live", "/api/rpc"), &[], body)
}

/// B's rooms and their participants, as B's token lists them.
pub fn live_state(ctx: &Ctx, b: &LiveTenant) -> Value {
    let result = |method: &str, params: Value| {
        room_call(ctx, method, &params.to_string())(Some(&b.token), &Vec::new()).json()["result"]
            .clone()
    };
    let participants = |room: &str| result("Room.ListParticipants", json!({"roomId": room}));
    json!({
        "rooms": result("Room.ListRooms", json!({})),
        ROOM: participants(ROOM),
        SHARED: participants(SHARED),
    })
}

pub fn matrices<'a>(
    ctx: &'a Ctx,
    rooms: &'a Rooms,
    a: &'a LiveTenant,
    b: &LiveTenant,
) -> Vec<Matrix<'a>> {
    let room = |method: &str, params: &str| room_call(ctx, method, params);
    let s = rooms.streams;
    let in_room = |room: &str, participant: &str, stream: i64| {
        ids(&[
            ("room", room),
            ("participant", participant),
            ("stream", &stream.to_string()),
        ])
    };
    let b_room = || {
        object(
            "B's room",
            in_room(ROOM, "b-part-one", s[0]),
            in_room("no-such-room", "no-such-participant", s[0]),
        )
    };
    let b_in_shared = || {
        object(
            "B's participant, in a room name A also uses",
            in_room(SHARED, "b-part-three", s[2]),
            in_room(SHARED, "no-such-participant", s[2]),
        )
    };
    let room_missing = expect(
        200,
        &rpc_error(
            1,
            r#"{"code":-11004,"data":{"roomId":"{room}"},"message":"Not found"}"#,
        ),
    );
    let missing = |target: &str| {
        expect(
            200,
            &rpc_error(
                1,
                &format!(
                    r#"{{"code":-11004,"data":{{"missing":[{target}]}},"message":"Not found"}}"#
                ),
            ),
        )
    };
    let kick = r#"{"roomId":"{room}","targets":[{"participantId":"{participant}"}]}"#;
    let stop =
        r#"{"roomId":"{room}","targets":[{"participantId":"{participant}","streamId":{stream}}]}"#;
    let mut calls = vec![
        call(
            "Room.ListRooms",
            room("Room.ListRooms", "{}"),
            listing(),
            expect(
                200,
                &format!(r#"{{"jsonrpc":"2.0","id":1,"result":["{SHARED}"]}}"#),
            ),
        ),
        call(
            "Room.ListParticipants",
            room("Room.ListParticipants", r#"{"roomId":"{room}"}"#),
            vec![b_room()],
            room_missing.clone(),
        ),
        call(
            "Room.DestroyRoom",
            room("Room.DestroyRoom", r#"{"roomId":"{room}"}"#),
            vec![b_room()],
            room_missing.clone(),
        ),
        call(
            "Room.KickParticipant",
            room("Room.KickParticipant", kick),
            vec![b_room()],
            room_missing.clone(),
        ),
        call(
            "Room.KickParticipant",
            room("Room.KickParticipant", kick),
            vec![b_in_shared()],
            missing(r#"{"participantId":"{participant}"}"#),
        ),
    ];
    for method in ["Room.InactiveStream", "Room.InactivateStream"] {
        calls.push(call(
            method,
            room(method, stop),
            vec![b_room()],
            room_missing.clone(),
        ));
        calls.push(call(
            method,
            room(method, stop),
            vec![b_in_shared()],
            missing(&format!(
                r#"{{"participantId":"{{participant}}","streamId":{}}}"#,
                s[2]
            )),
        ));
    }
    let unauthorized = expect(
        200,
        &rpc_error(1, r#"{"code":-11002,"message":"Unauthorized"}"#),
    );
    let b_service = |extra: &[(&str, &str)]| {
        let with = |service: &str| {
            let mut v = ids(&[("service", service)]);
            v.extend(ids(extra));
            v
        };
        vec![object(
            "B's service",
            with(&b.service),
            with("no-such-service"),
        )]
    };
    let provision_call = Call {
        masked: &["/error/data/nonce"],
        ..call(
            "Provision (step 2 with A's admin secret)",
            Box::new(move |secret, ids| provision(ctx, id(ids, "service"), secret.unwrap())),
            b_service(&[]),
            expect(
                200,
                &rpc_error(
                    2,
                    r#"{"code":-11002,"data":{"nonce":"{nonce}"},"message":"Unauthorized"}"#,
                ),
            ),
        )
    };
    let rt = &rooms.rt;
    let live = ctx.srv.live.clone();
    let join = call(
        "participant join (WebSocket, A's service secret)",
        Box::new(move |secret, ids| {
            let refused = rt.block_on(Participant::join(
                &live,
                id(ids, "service"),
                secret.unwrap(),
                id(ids, "room"),
                None,
            ));
            let Err(ClientError::Rpc(error)) = refused else {
                panic!(
                    "a join with another service's secret: {:?}",
                    refused.map(|p| p.joined)
                )
            };
            // The upgrade succeeded; the refusal is the error frame.
            Answer {
                status: 101,
                content_type: None,
                www_authenticate: None,
                body: serde_json::to_string(&error).unwrap(),
            }
        }),
        b_service(&[("room", ROOM)]),
        expect(101, r#"{"code":-11002,"message":"Unauthorized"}"#),
    );
    let forged = forged_token_calls(ctx, rooms, b_service(&[("room", ROOM)]));
    vec![
        Matrix {
            service: "live",
            creds: vec![
                Cred::tenant("A's room token", &a.token),
                Cred::stranger("the operator token", Some(&ctx.operator)),
            ],
            unauthorized: unauthorized.clone(),
            calls,
        },
        Matrix {
            service: "live",
            creds: vec![Cred::tenant("A's admin secret", &a.admin_secret)],
            unauthorized: unauthorized.clone(),
            calls: vec![provision_call],
        },
        Matrix {
            service: "live",
            creds: vec![Cred::tenant("A's service secret", &a.service_secret)],
            unauthorized,
            calls: vec![join],
        },
        Matrix {
            service: "live",
            creds: vec![Cred::tenant(
                "a join token naming B's service, signed with A's service secret",
                &a.service_secret,
            )],
            unauthorized: expect(401, NOT_A_VALID_JOIN_TOKEN),
            calls: forged,
        },
    ]
}

const NOT_A_VALID_JOIN_TOKEN: &str = r#"{"error":{"code":-11002,"data":{"reason":"not a valid join token"},"message":"Unauthorized"},"id":null,"jsonrpc":"2.0"}"#;

/// WHIP, WHEP and the socket with a join token forged for B's service (or one that does not
/// exist): one answer, that tells nothing of which exists.
fn forged_token_calls<'a>(ctx: &'a Ctx, rooms: &'a Rooms, objects: Vec<Object>) -> Vec<Call<'a>> {
    let forge = |secret: Option<&str>, ids: &Ids| {
        let service = id(ids, "service");
        let claims = JoinClaims {
            iss: service.into(),
            room: id(ids, "room").into(),
            sub: "forger".into(),
            exp: 4_000_000_000,
            publish: None,
            subscribe: None,
        };
        join_token(service, secret.unwrap(), &claims)
    };
    let offer = move |path: String| -> Send<'a> {
        Box::new(move |secret, ids| {
            Answer::of(
                ctx.client
                    .post(fill(&ctx.url("live", &path), ids))
                    .bearer_auth(forge(secret, ids))
                    .header("content-type", "application/sdp")
                    .body("v=0\r\n"),
            )
        })
    };
    let rt = &rooms.rt;
    let live = ctx.srv.live.clone();
    let socket: Send<'a> = Box::new(move |secret, ids| {
        let refused = rt.block_on(Participant::join_with_token(&live, &forge(secret, ids)));
        let Err(ClientError::Rpc(error)) = refused else {
            panic!("a forged join token: {:?}", refused.map(|p| p.joined))
        };
        Answer {
            status: 101,
            content_type: None,
            www_authenticate: None,
            body: serde_json::to_string(&error).unwrap(),
        }
    });
    let stream = rooms.streams[0];
    vec![
        call(
            "WHIP publish (a forged join token)",
            offer("/api/whip/{room}".into()),
            objects.clone(),
            expect(401, NOT_A_VALID_JOIN_TOKEN),
        ),
        call(
            "WHEP subscribe (a forged join token)",
            offer(format!("/api/whep/{{room}}/{stream}")),
            objects.clone(),
            expect(401, NOT_A_VALID_JOIN_TOKEN),
        ),
        call(
            "participant join (WebSocket, a forged join token)",
            socket,
            objects,
            expect(
                101,
                r#"{"code":-11002,"message":"Unauthorized","data":{"reason":"not a valid join token"}}"#,
            ),
        ),
    ]
}
