//! Isolation between tenants (issue #8), on the real `kep` binary. Each service gets two
//! tenants (A and B) with real objects; then A's credentials are tried on every call of the
//! service that names an object, against B's objects. Each case must be refused as the
//! documents say, answered byte for byte as the same call on an object that does not exist
//! (no existence oracle), show none of B's data, and leave B's objects as they were, read
//! back with B's credentials. The number of cases tried is printed (`--nocapture`).

use std::time::{Duration, Instant};

use crate::common::{Server, StopsGracefully, port0, serve, wait_available};
use kep_api::live::{ClientMessage, EventKind, ServerMessage, provision_value};
use kep_client::ClientError;
use kep_client::live::Participant;
use reqwest::blocking::multipart::{Form, Part};
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::{Value, json};

/// An object's ids by placeholder name: `{room}` in a template stands for the `room` id.
type Ids = Vec<(String, String)>;

fn ids(pairs: &[(&str, &str)]) -> Ids {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn fill(template: &str, ids: &Ids) -> String {
    ids.iter().fold(template.to_owned(), |t, (k, v)| {
        t.replace(&format!("{{{k}}}"), v)
    })
}

fn id<'i>(ids: &'i Ids, name: &str) -> &'i str {
    &ids.iter()
        .find(|(k, _)| k == name)
        .expect("an id of the object")
        .1
}

/// What a client acts on in an answer: the status, the headers that tell it what to do,
/// and the body as sent.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    www_authenticate: Option<String>,
    body: String,
}

impl Answer {
    fn of(req: RequestBuilder) -> Self {
        let res = req.send().unwrap();
        let header = |name: &str| {
            res.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        Answer {
            status: res.status().as_u16(),
            content_type: header("content-type"),
            www_authenticate: header("www-authenticate"),
            body: res.text().unwrap(),
        }
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// Asserts a 2xx; the body as JSON.
    fn ok(&self, what: &str) -> Value {
        assert!((200..300).contains(&self.status), "{what}: {self:?}");
        self.json()
    }

    /// The body with each id of `ids` written as its `{name}`, so that the answers about two
    /// objects compare. Ids shorter than 8 characters (an org id, a stream id) are left as
    /// they are: no answer echoes them, and replacing them would rewrite unrelated digits.
    fn naming(mut self, ids: &Ids) -> Self {
        for (name, value) in ids {
            if value.len() >= 8 {
                self.body = self.body.replace(value.as_str(), &format!("{{{name}}}"));
            }
        }
        self
    }

    /// The body with the string at each JSON pointer written as `{its last segment}`: what
    /// is new in every answer (a nonce, a uid).
    fn masking(mut self, pointers: &[&str]) -> Self {
        let v = self.json();
        for p in pointers {
            if let Some(s) = v.pointer(p).and_then(Value::as_str) {
                let name = p.rsplit('/').next().unwrap();
                self.body = self.body.replace(s, &format!("{{{name}}}"));
            }
        }
        self
    }
}

/// A credential: its secret (none: the call goes without one), and whether it is a tenant's
/// of this API (its calls reach the object lookup) or one that must not open the API.
struct Cred {
    name: &'static str,
    secret: Option<String>,
    tenant: bool,
}

impl Cred {
    fn tenant(name: &'static str, secret: &str) -> Self {
        Cred {
            name,
            secret: Some(secret.to_owned()),
            tenant: true,
        }
    }

    fn stranger(name: &'static str, secret: Option<&str>) -> Self {
        Cred {
            name,
            secret: secret.map(str::to_owned),
            tenant: false,
        }
    }
}

/// An expected answer: its status and, where it is fixed, its body (ids named, volatile
/// fields masked).
#[derive(Clone)]
struct Expect {
    status: u16,
    body: Option<String>,
}

fn expect(status: u16, body: &str) -> Expect {
    Expect {
        status,
        body: Some(body.to_owned()),
    }
}

/// Makes a call with a credential's secret on the object the ids name.
type Send<'a> = Box<dyn Fn(Option<&str>, &Ids) -> Answer + 'a>;

/// One of B's objects a call can name, and its twin that does not exist. A listing names
/// no object: it has no twin, only B's data to keep out of its answer.
#[derive(Clone)]
struct Object {
    name: String,
    theirs: Ids,
    missing: Option<Ids>,
}

fn object(name: &str, theirs: Ids, missing: Ids) -> Object {
    Object {
        name: name.to_owned(),
        theirs,
        missing: Some(missing),
    }
}

fn listing() -> Vec<Object> {
    vec![Object {
        name: "the caller's own collection".into(),
        theirs: Vec::new(),
        missing: None,
    }]
}

struct Call<'a> {
    name: String,
    send: Send<'a>,
    objects: Vec<Object>,
    /// What a tenant's credential gets.
    refused: Expect,
    /// What any other credential gets, where this call answers it unlike the matrix.
    unauthorized: Option<Expect>,
    /// Fields that are new in every answer.
    masked: &'static [&'static str],
}

fn call<'a>(
    name: impl Into<String>,
    send: Send<'a>,
    objects: Vec<Object>,
    refused: Expect,
) -> Call<'a> {
    Call {
        name: name.into(),
        send,
        objects,
        refused,
        unauthorized: None,
        masked: &[],
    }
}

/// Calls × their objects × credentials: every combination is one case.
struct Matrix<'a> {
    service: &'static str,
    creds: Vec<Cred>,
    /// What a credential that is not a tenant's gets.
    unauthorized: Expect,
    calls: Vec<Call<'a>>,
}

impl Matrix<'_> {
    /// Runs every case; how many there were.
    fn run(&self, markers: &[String]) -> usize {
        let mut cases = 0;
        for call in &self.calls {
            for object in &call.objects {
                for cred in &self.creds {
                    let case = format!(
                        "{}: {} on {} with {}",
                        self.service, call.name, object.name, cred.name
                    );
                    let secret = cred.secret.as_deref();
                    let theirs = (call.send)(secret, &object.theirs).naming(&object.theirs);
                    let missing = object
                        .missing
                        .as_ref()
                        .map(|m| (call.send)(secret, m).naming(m));
                    for answer in std::iter::once(&theirs).chain(&missing) {
                        if let Some(m) = markers.iter().find(|m| answer.body.contains(*m)) {
                            panic!("{case}: B's {m:?} in {answer:?}");
                        }
                    }
                    let theirs = theirs.masking(call.masked);
                    if let Some(missing) = missing {
                        assert_eq!(
                            theirs,
                            missing.masking(call.masked),
                            "{case}: answered unlike an object that does not exist"
                        );
                    }
                    let expected = match (cred.tenant, &call.unauthorized) {
                        (true, _) => &call.refused,
                        (false, Some(e)) => e,
                        (false, None) => &self.unauthorized,
                    };
                    assert_eq!(theirs.status, expected.status, "{case}: {theirs:?}");
                    if let Some(body) = &expected.body {
                        assert_eq!(&theirs.body, body, "{case}");
                    }
                    cases += 1;
                }
            }
            let objects: Vec<&str> = call.objects.iter().map(|o| o.name.as_str()).collect();
            eprintln!(
                "isolation: {}: {} on {} x {} credential(s) = {} cases",
                self.service,
                call.name,
                objects.join(", "),
                self.creds.len(),
                call.objects.len() * self.creds.len()
            );
        }
        cases
    }
}

/// How a call carries its body; templates are filled with the object's ids.
enum Body {
    Empty,
    Json(String),
    /// A multipart form with one file part.
    File {
        part: &'static str,
        content: String,
    },
}

/// The server, one HTTP client, and the operator token that set everything up.
struct Ctx<'s> {
    srv: &'s Server,
    client: Client,
    operator: String,
}

impl Ctx<'_> {
    fn url(&self, listener: &str, path: &str) -> String {
        format!("{}{path}", self.srv.url(listener))
    }

    /// An operator call that must succeed; its answer.
    fn admin(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .client
            .request(method.parse().unwrap(), self.url("admin", path))
            .bearer_auth(&self.operator);
        if let Some(b) = body {
            req = req.json(&b);
        }
        Answer::of(req).ok(&format!("{method} {path}"))
    }

    /// A call as a template: `{name}` in the URL, the headers and the body stands for the
    /// object's id `name`; the secret goes in `Authorization: <scheme> <secret>`.
    fn send<'a>(
        &'a self,
        scheme: &'static str,
        method: &str,
        url: String,
        headers: &[(&'static str, &str)],
        body: Body,
    ) -> Send<'a> {
        let method: reqwest::Method = method.parse().unwrap();
        let headers: Vec<(&'static str, String)> =
            headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        Box::new(move |secret, ids| {
            let mut req = self.client.request(method.clone(), fill(&url, ids));
            if let Some(s) = secret {
                req = req.header("authorization", format!("{scheme} {s}"));
            }
            for (k, v) in &headers {
                req = req.header(*k, fill(v, ids));
            }
            req = match &body {
                Body::Empty => req,
                Body::Json(t) => req
                    .header("content-type", "application/json")
                    .body(fill(t, ids)),
                Body::File { part, content } => req.multipart(Form::new().part(
                    *part,
                    Part::bytes(fill(content, ids).into_bytes()).file_name("f"),
                )),
            };
            Answer::of(req)
        })
    }
}

// ---- Live streaming ----

const ROOM: &str = "b-only-room";
const SHARED: &str = "shared-room";

fn rpc(id: u8, method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
}

fn rpc_error(id: u8, error: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#)
}

struct LiveTenant {
    service: String,
    admin_secret: String,
    service_secret: String,
    token: String,
}

/// Provision's two steps, as a customer's server makes them: the token, or the refusal.
fn provision(ctx: &Ctx, service: &str, admin_secret: &str) -> Answer {
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

fn live_tenant(ctx: &Ctx, service: &str) -> LiveTenant {
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
struct Rooms {
    rt: tokio::runtime::Runtime,
    b: [Participant; 3],
    streams: [i64; 3],
    _a: Participant,
}

impl Rooms {
    fn new(ctx: &Ctx, a: &LiveTenant, b: &LiveTenant) -> Self {
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
    fn nothing_reached_b(&mut self) {
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

async fn next_event(p: &mut Participant) -> kep_api::live::Event {
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
fn room_call<'a>(ctx: &'a Ctx, method: &str, params: &str) -> Send<'a> {
    let body = Body::Json(rpc(1, method, params));
    ctx.send("Bearer", "POST", ctx.url("live", "/api/rpc"), &[], body)
}

/// B's rooms and their participants, as B's token lists them.
fn live_state(ctx: &Ctx, b: &LiveTenant) -> Value {
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

fn live_matrices<'a>(
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
    ]
}

// ---- Account adapter ----

struct Org {
    id: String,
    secret: String,
}

fn org(ctx: &Ctx, sync_option: &str) -> Org {
    let made = ctx.admin(
        "POST",
        "/admin/v1/adapter/org-login-types",
        Some(json!({
            "method": "OAUTH2", "adapter_agent": "127.0.0.1:9",
            "data_model": {"user": {"synchronization": {"options": [sync_option]}}},
        })),
    );
    Org {
        id: made["id"].to_string(),
        secret: made["secret_key"].as_str().unwrap().to_owned(),
    }
}

/// `getOrgLoginType` of the org `{org}`.
fn get_org<'a>(ctx: &'a Ctx) -> Send<'a> {
    ctx.send(
        "Secret",
        "GET",
        ctx.url("adapter", "/api/trust/login/v0/getOrgLoginType"),
        &[("Kep-OrgLoginType", "ID {org}")],
        Body::Empty,
    )
}

/// `uploadResult` `{result}` for the session `{session}` of `{org}`, file `{file}`.
fn upload_result<'a>(ctx: &'a Ctx) -> Send<'a> {
    ctx.send(
        "Secret",
        "POST",
        ctx.url("adapter", "/api/trust/drm/v0/uploadResult"),
        &[
            ("Kep-OrgLoginType", "ID {org}"),
            ("Kep-AgentSession", "DSID {session}"),
            ("Kep-File-Id", "{file}"),
            ("Kep-File-Type", "DRM"),
        ],
        Body::Json(r#"{"result":"{result}","reason":"isolation"}"#.into()),
    )
}

/// `uploadDecrypted` of `{content}` for the session `{session}` of `{org}`, file `{file}`.
fn upload_decrypted<'a>(ctx: &'a Ctx) -> Send<'a> {
    ctx.send(
        "Secret",
        "POST",
        ctx.url("adapter", "/api/trust/drm/v0/uploadDecrypted"),
        &[
            ("Kep-OrgLoginType", "ID {org}"),
            ("Kep-AgentSession", "DSID {session}"),
            ("Kep-File-Id", "{file}"),
        ],
        Body::File {
            part: "file",
            content: "{content}".into(),
        },
    )
}

/// Two orgs; B's DRM sessions in each state an agent can leave one in, B's agent having
/// answered them (a released file for `RELEASED`).
struct Adapter {
    a: Org,
    b: Org,
    /// (status, session, file)
    sessions: Vec<(&'static str, String, String)>,
}

const B_RELEASED: &str = "b-released-content-marker";

impl Adapter {
    fn new(ctx: &Ctx) -> Self {
        let a = org(ctx, "a-sync-option");
        let b = org(ctx, "b-sync-option-marker");
        assert_eq!(
            get_org(ctx)(Some(&a.secret), &ids(&[("org", &a.id)])).status,
            200
        );
        let (result, decrypted) = (upload_result(ctx), upload_decrypted(ctx));
        let mut sessions = Vec::new();
        for status in ["PENDING", "GRANTED", "RELEASED", "DENIED"] {
            let file = format!("b-file-{}", status.to_lowercase());
            let made = ctx.admin(
                "POST",
                "/admin/v1/adapter/drm-requests",
                Some(
                    json!({"org_login_type_id": b.id.parse::<i64>().unwrap(), "file_id": file,
                    "file_type": "DRM", "user": "b-user-marker"}),
                ),
            );
            let session = made["session_id"].as_str().unwrap().to_owned();
            let with = |result: &str| agent_ids(&b.id, &session, &file, result, B_RELEASED);
            let answered = match status {
                "GRANTED" | "RELEASED" => Some("SUCCESS"),
                "DENIED" => Some("FAILURE"),
                _ => None,
            };
            if let Some(answer) = answered {
                result(Some(&b.secret), &with(answer)).ok(status);
            }
            if status == "RELEASED" {
                decrypted(Some(&b.secret), &with("SUCCESS")).ok(status);
            }
            let shown = ctx.admin(
                "GET",
                &format!("/admin/v1/adapter/drm-requests/{session}"),
                None,
            );
            assert_eq!(shown["status"], status);
            sessions.push((status, session, file));
        }
        Adapter { a, b, sessions }
    }

    /// What B sees and has: each session (less its notification attempts, which go on by
    /// themselves), its org through its agent, its released file.
    fn state(&self, ctx: &Ctx) -> Value {
        let sessions: Vec<Value> = self
            .sessions
            .iter()
            .map(|(_, s, _)| {
                let mut shown =
                    ctx.admin("GET", &format!("/admin/v1/adapter/drm-requests/{s}"), None);
                shown.as_object_mut().unwrap().remove("notifications");
                shown
            })
            .collect();
        let released = &self.sessions[2].1;
        let file = Answer::of(
            ctx.client
                .get(ctx.url(
                    "admin",
                    &format!("/admin/v1/adapter/drm-requests/{released}/file"),
                ))
                .bearer_auth(&ctx.operator),
        );
        json!({
            "sessions": sessions,
            "org": get_org(ctx)(Some(&self.b.secret), &ids(&[("org", &self.b.id)])).ok("B's org"),
            "file": file.body,
        })
    }

    /// B's agent answers the session still pending and releases the granted file: A's
    /// attempts used up neither.
    fn b_finishes(&self, ctx: &Ctx) {
        let [(_, pending, pending_file), (_, granted, granted_file), ..] = &self.sessions[..]
        else {
            unreachable!()
        };
        upload_result(ctx)(
            Some(&self.b.secret),
            &agent_ids(&self.b.id, pending, pending_file, "SUCCESS", B_RELEASED),
        )
        .ok("B's pending session");
        upload_decrypted(ctx)(
            Some(&self.b.secret),
            &agent_ids(&self.b.id, granted, granted_file, "SUCCESS", B_RELEASED),
        )
        .ok("B's granted session");
    }

    fn matrices<'a>(&self, ctx: &'a Ctx) -> Vec<Matrix<'a>> {
        let sessions = |org: &str, missing_org: &str| -> Vec<Object> {
            let call = |org: &str, session: &str, file: &str| {
                agent_ids(org, session, file, "SUCCESS", "a-probe-content")
            };
            self.sessions
                .iter()
                .map(|(status, s, f)| {
                    object(
                        &format!("B's {status} session"),
                        call(org, s, f),
                        call(missing_org, "no-such-session-id", f),
                    )
                })
                .collect()
        };
        let not_found = expect(404, r#"{"_code":404,"_message":"no such session"}"#);
        let wrong_key = expect(401, r#"{"_code":401,"_message":"invalid secret key"}"#);
        // A names its own org and B's session; or B's org, where A's key is wrong.
        let mut calls = vec![call(
            "getOrgLoginType, Kep-OrgLoginType B's",
            get_org(ctx),
            vec![object(
                "B's org",
                ids(&[("org", &self.b.id)]),
                ids(&[("org", "999999999")]),
            )],
            wrong_key.clone(),
        )];
        for (name, send) in [
            ("uploadResult", upload_result as fn(&'a Ctx) -> Send<'a>),
            ("uploadDecrypted", upload_decrypted),
        ] {
            calls.push(call(
                name,
                send(ctx),
                sessions(&self.a.id, &self.a.id),
                not_found.clone(),
            ));
            calls.push(call(
                format!("{name}, Kep-OrgLoginType B's"),
                send(ctx),
                sessions(&self.b.id, "999999999"),
                wrong_key.clone(),
            ));
        }
        vec![Matrix {
            service: "adapter",
            creds: vec![
                Cred::tenant("A's secret key", &self.a.secret),
                Cred::stranger("the operator token", Some(&ctx.operator)),
            ],
            unauthorized: wrong_key,
            calls,
        }]
    }
}

/// The ids of an agent call by the org `org` on a session.
fn agent_ids(org: &str, session: &str, file: &str, result: &str, content: &str) -> Ids {
    ids(&[
        ("org", org),
        ("session", session),
        ("file", file),
        ("result", result),
        ("content", content),
    ])
}

// ---- Message sending ----

const B_PHONE: &str = "821077771234";
const A_PHONE: &str = "821066665678";

/// How a client presents its credentials at the token endpoint (CONTRACT §4).
#[derive(Clone, Copy, Debug)]
enum TokenAuth {
    HttpBasic,
    TwoWordBasic,
    FormFields,
}

/// `POST /v2/oauth/token` as the client `{client}` with the secret given.
fn token_call<'a>(ctx: &'a Ctx, how: TokenAuth) -> Send<'a> {
    Box::new(move |secret, ids| {
        let (client, secret) = (id(ids, "client"), secret.unwrap());
        let mut form = vec![("grant_type", "client_credentials")];
        let req = ctx.client.post(ctx.url("messaging", "/v2/oauth/token"));
        let req = match how {
            TokenAuth::HttpBasic => req.basic_auth(client, Some(secret)),
            TokenAuth::TwoWordBasic => {
                req.header("authorization", format!("Basic {client} {secret}"))
            }
            TokenAuth::FormFields => {
                form.extend([("client_id", client), ("client_secret", secret)]);
                req
            }
        };
        Answer::of(req.form(&form))
    })
}

struct MsgTenant {
    client: String,
    secret: String,
    token: String,
}

impl MsgTenant {
    fn new(ctx: &Ctx, name: &str) -> Self {
        let made = ctx.admin(
            "POST",
            "/admin/v1/messaging/clients",
            Some(json!({"name": name})),
        );
        let client = made["client_id"].as_str().unwrap().to_owned();
        let secret = made["client_secret"].as_str().unwrap().to_owned();
        let token =
            token_call(ctx, TokenAuth::HttpBasic)(Some(&secret), &ids(&[("client", &client)]))
                .ok("a token")["access_token"]
                .as_str()
                .unwrap()
                .to_owned();
        MsgTenant {
            client,
            secret,
            token,
        }
    }

    fn call(&self, ctx: &Ctx, method: &str, path: &str, body: Option<&Value>) -> Answer {
        let mut req = ctx
            .client
            .request(method.parse().unwrap(), ctx.url("messaging", path))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        Answer::of(req)
    }

    fn send(&self, ctx: &Ctx, channel: &str, body: &Value) -> String {
        self.call(ctx, "POST", &format!("/v2/send/{channel}"), Some(body))
            .ok("a send")["uid"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn upload(&self, ctx: &Ctx, path: &str, form: Form) -> Value {
        Answer::of(
            ctx.client
                .post(ctx.url("messaging", path))
                .bearer_auth(&self.token)
                .multipart(form),
        )
        .ok(path)
    }

    /// The message's detail once delivery has finished.
    fn finished(&self, ctx: &Ctx, channel: &str, uid: &str) -> Value {
        let (path, status) = match channel {
            "xms" => ("message", "/result/status_code"),
            _ => ("rcs", "/result/status"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let detail = self
                .call(
                    ctx,
                    "GET",
                    &format!("/v2/info/{path}/search/detail/{uid}"),
                    None,
                )
                .ok("a detail");
            if detail.pointer(status) != Some(&json!("API_100")) {
                return detail;
            }
            assert!(
                Instant::now() < deadline,
                "{uid} still in processing: {detail}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Hands out the finished RCS results as a new group; its id.
    fn results(&self, ctx: &Ctx, uid: &str) -> String {
        let group = self
            .call(ctx, "GET", "/v2/info/rcs/results", None)
            .ok("results");
        assert_eq!(group["results"][0]["uid"], uid, "{group}");
        group["report_group_id"].as_str().unwrap().to_owned()
    }
}

fn xms(cid: &str, phone: &str, extra: Value) -> Value {
    let mut body = json!({"cid": cid, "message_type": "SM", "phone_number": phone,
        "message": "a-text", "sender_no": "0212345678"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

fn rcs(cid: &str, phone: &str, card: Value) -> Value {
    json!({"cid": cid, "message_type": "RCSMMS", "phone_number": phone, "template_code": "OO000000",
        "agency_id": "agency", "ad_flag": "N", "sender_no": "0212345678", "fall_back_yn": false,
        "body": [card]})
}

/// Bytes the upload checks take for an image: its magic number, then filler.
fn image(magic: &[u8]) -> Vec<u8> {
    let mut bytes = magic.to_vec();
    bytes.resize(1000, 0x11);
    bytes
}

/// Two clients; B's uploads, messages of every channel and kind, and result groups (one
/// completed, one open).
struct Messaging {
    a: MsgTenant,
    b: MsgTenant,
    /// (what, channel, uid, cid)
    messages: Vec<(&'static str, &'static str, String, &'static str)>,
    rcs_file: String,
    mms_group: String,
    completed_group: String,
    open_group: String,
}

impl Messaging {
    fn new(ctx: &Ctx) -> Self {
        let (a, b) = (
            MsgTenant::new(ctx, "tenant-a"),
            MsgTenant::new(ctx, "tenant-b"),
        );
        a.send(ctx, "xms", &xms("a-own-cid", A_PHONE, json!({})));
        let rcs_file = b.upload(
            ctx,
            "/v2/upload/rcs",
            Form::new()
                .part(
                    "image",
                    Part::bytes(image(b"\x89PNG\r\n\x1a\n")).file_name("b.png"),
                )
                .text("description", "b-upload-marker"),
        )["file_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mms_group = b.upload(
            ctx,
            "/v2/upload/message/mms/files",
            Form::new().part(
                "files",
                Part::bytes(image(&[0xFF, 0xD8, 0xFF, 0xE0])).file_name("b.jpg"),
            ),
        )["content_group_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let sm = xms(
            "b-xms-cid-one",
            B_PHONE,
            json!({"message": "b-text-marker-sm"}),
        );
        let mm = xms(
            "b-mms-cid-one",
            B_PHONE,
            json!({"message_type": "MM", "message": "b-text-marker-mm", "title": "b-title-marker",
                "content_group_id": mms_group}),
        );
        let card = |cid: &str, media: Option<&str>| {
            let mut card = json!({"title": "b-card-marker", "description": "b-text-marker-rcs"});
            if let Some(file) = media {
                card["media"] = json!(format!("maapfile://{file}"));
            }
            rcs(cid, B_PHONE, card)
        };
        let mut messages = vec![
            ("B's SM", "xms", b.send(ctx, "xms", &sm), "b-xms-cid-one"),
            ("B's MM", "xms", b.send(ctx, "xms", &mm), "b-mms-cid-one"),
        ];
        // One RCS result group completed, then one left open.
        let first = b.send(ctx, "rcs", &card("b-rcs-cid-one", Some(&rcs_file)));
        b.finished(ctx, "rcs", &first);
        let completed_group = b.results(ctx, &first);
        b.call(
            ctx,
            "PUT",
            &format!("/v2/info/rcs/results/complete/{completed_group}"),
            None,
        )
        .ok("complete");
        let second = b.send(ctx, "rcs", &card("b-rcs-cid-two", None));
        b.finished(ctx, "rcs", &second);
        let open_group = b.results(ctx, &second);
        messages.push((
            "B's RCS in a completed group",
            "rcs",
            first,
            "b-rcs-cid-one",
        ));
        messages.push(("B's RCS in an open group", "rcs", second, "b-rcs-cid-two"));
        for (_, channel, uid, _) in &messages {
            b.finished(ctx, channel, uid);
        }
        Messaging {
            a,
            b,
            messages,
            rcs_file,
            mms_group,
            completed_group,
            open_group,
        }
    }

    /// What B reads of its own: every message's detail and both searches.
    fn state(&self, ctx: &Ctx) -> Value {
        let details: Vec<Value> = self
            .messages
            .iter()
            .map(|(_, channel, uid, _)| self.b.finished(ctx, channel, uid))
            .collect();
        json!({
            "details": details,
            "xms": self.b.call(ctx, "POST", "/v2/info/message/search", Some(&json!({}))).ok("search"),
            "rcs": self.b.call(ctx, "POST", "/v2/info/rcs/search", Some(&json!({}))).ok("search"),
        })
    }

    /// B completes its open group, gets a token with its secret, and sends with its uploads.
    fn b_finishes(&self, ctx: &Ctx) {
        let b = &self.b;
        b.call(
            ctx,
            "PUT",
            &format!("/v2/info/rcs/results/complete/{}", self.open_group),
            None,
        )
        .ok("B completes its open group");
        token_call(ctx, TokenAuth::HttpBasic)(Some(&b.secret), &ids(&[("client", &b.client)]))
            .ok("B's secret");
        let card = json!({"title": "t", "description": "d", "media": format!("maapfile://{}", self.rcs_file)});
        b.send(ctx, "rcs", &rcs("b-after-rcs", B_PHONE, card));
        let mm = json!({"message_type": "MM", "title": "t", "content_group_id": self.mms_group});
        b.send(ctx, "xms", &xms("b-after-mm", B_PHONE, mm));
    }

    fn matrices<'a>(&self, ctx: &'a Ctx) -> Vec<Matrix<'a>> {
        let bearer = |method: &str, path: &str, body: Option<Value>| {
            let body = body.map_or(Body::Empty, |b| Body::Json(b.to_string()));
            ctx.send("Bearer", method, ctx.url("messaging", path), &[], body)
        };
        let one = |name: &str, key: &str, theirs: &str, missing: &str| {
            object(name, ids(&[(key, theirs)]), ids(&[(key, missing)]))
        };
        let uids: Vec<Object> = self
            .messages
            .iter()
            .map(|(what, _, uid, _)| one(what, "uid", uid, "00000000000000000042"))
            .collect();
        let cids = |channel: &str, fresh: &str| -> Vec<Object> {
            self.messages
                .iter()
                .filter(|(_, c, _, _)| *c == channel)
                .map(|(what, _, _, cid)| one(&format!("the cid of {what}"), "cid", cid, fresh))
                .collect()
        };
        let b_client = || {
            vec![one(
                "B's client id",
                "client",
                &self.b.client,
                "no-such-client-id",
            )]
        };
        let refusal = |status: u16, code: &str, message: &str| {
            expect(
                status,
                &format!(
                    r#"{{"code":"{code}","result":{{"detail_code":"API_{code}","detail_message":"{message}"}}}}"#
                ),
            )
        };
        let detail = |code: u16, message: &str| {
            expect(
                code,
                &format!(
                    r#"{{"code":"{code}","code_detail":{{"detail_code":"API_{code}","detail_message":"{message}"}}}}"#
                ),
            )
        };
        let unknown_token = "invalid token: unknown or expired access token";
        let card = json!({"title": "t", "description": "d"});
        let mut calls = vec![
            call(
                "GET /v2/info/message/search/detail/{uid}",
                bearer("GET", "/v2/info/message/search/detail/{uid}", None),
                uids.clone(),
                refusal(404, "404", "no message {uid}"),
            ),
            Call {
                // This call's codes are HTTP-style (seed 002), a bad token's included.
                unauthorized: Some(detail(401, unknown_token)),
                ..call(
                    "GET /v2/info/rcs/search/detail/{uid}",
                    bearer("GET", "/v2/info/rcs/search/detail/{uid}", None),
                    uids,
                    detail(404, "no such message"),
                )
            },
            call(
                "PUT /v2/info/rcs/results/complete/{report_group_id}",
                bearer("PUT", "/v2/info/rcs/results/complete/{group}", None),
                [
                    ("B's open group", &self.open_group),
                    ("B's completed group", &self.completed_group),
                ]
                .into_iter()
                .map(|(name, group)| one(name, "group", group, "no-such-group-id"))
                .collect(),
                refusal(400, "410", "report_group_id: no such open group"),
            ),
            call(
                "POST /v2/send/rcs, media of B's upload",
                bearer(
                    "POST",
                    "/v2/send/rcs",
                    Some(rcs(
                        "a-media-cid",
                        A_PHONE,
                        json!({"title": "t", "description": "d", "media": "maapfile://{file}"}),
                    )),
                ),
                vec![one(
                    "B's RCS file",
                    "file",
                    &self.rcs_file,
                    "no-such-rcs-file",
                )],
                refusal(
                    400,
                    "420",
                    "body[0].media: no such RCS upload, or it expired",
                ),
            ),
            call(
                "POST /v2/send/xms, content_group_id of B's upload",
                bearer(
                    "POST",
                    "/v2/send/xms",
                    Some(xms(
                        "a-mms-cid",
                        A_PHONE,
                        json!({"message_type": "MM", "content_group_id": "{group}"}),
                    )),
                ),
                vec![one(
                    "B's MMS files",
                    "group",
                    &self.mms_group,
                    "no-such-mms-group",
                )],
                refusal(
                    400,
                    "420",
                    "content_group_id: no such MMS upload, or it expired",
                ),
            ),
            call(
                "POST /v2/send/xms, client_id of B",
                bearer(
                    "POST",
                    "/v2/send/xms",
                    Some(xms(
                        "a-client-cid",
                        A_PHONE,
                        json!({"client_id": "{client}"}),
                    )),
                ),
                b_client(),
                refusal(
                    400,
                    "410",
                    "client_id: is not the client of the access token",
                ),
            ),
        ];
        // A cid is the client's own key: B's is a fresh one to A, and A's send is A's own.
        let accepted = r#"{"code":"200","uid":"{uid}","cid":"{cid}","result":{"detail_code":"API_200","detail_message":"accepted"}}"#;
        for (channel, body) in [
            ("xms", xms("{cid}", A_PHONE, json!({}))),
            ("rcs", rcs("{cid}", A_PHONE, card)),
        ] {
            calls.push(Call {
                masked: &["/uid"],
                ..call(
                    format!("POST /v2/send/{channel}, cid of B's"),
                    bearer("POST", &format!("/v2/send/{channel}"), Some(body)),
                    cids(channel, &format!("a-fresh-cid-{channel}")),
                    expect(200, accepted),
                )
            });
        }
        let empty_page = expect(
            200,
            r#"{"status":"200","code":"200","count":0,"next":false,"code_detail":{"detail_code":"API_200","detail_message":"ok"},"results":[]}"#,
        );
        let by_client = Some(json!({"client_id": "{client}"}));
        for (method, path, body) in [
            ("POST", "/v2/info/message/search", by_client.clone()),
            ("POST", "/v2/info/rcs/search", by_client),
            ("GET", "/v2/info/rcs/search?client_id={client}", None),
        ] {
            calls.push(call(
                format!("{method} {path}, client_id of B"),
                bearer(method, path, body),
                b_client(),
                empty_page.clone(),
            ));
        }
        for (method, path, body) in [
            ("POST", "/v2/info/message/search", Some(json!({}))),
            ("POST", "/v2/info/rcs/search", Some(json!({}))),
            ("GET", "/v2/info/rcs/search", None),
            ("GET", "/v2/info/rcs/results", None),
            ("POST", "/v2/info/rcs/results", None),
        ] {
            calls.push(call(
                format!("{method} {path}"),
                bearer(method, path, body),
                listing(),
                listed(),
            ));
        }
        let invalid_client = expect(401, r#"{"error":"invalid_client"}"#);
        let token_calls = [
            TokenAuth::HttpBasic,
            TokenAuth::TwoWordBasic,
            TokenAuth::FormFields,
        ]
        .into_iter()
        .map(|how| {
            call(
                format!("POST /v2/oauth/token, B's client id ({how:?})"),
                token_call(ctx, how),
                b_client(),
                invalid_client.clone(),
            )
        })
        .collect();
        vec![
            Matrix {
                service: "messaging",
                creds: vec![
                    Cred::tenant("A's access token", &self.a.token),
                    Cred::stranger("the operator token", Some(&ctx.operator)),
                ],
                unauthorized: refusal(401, "400", unknown_token),
                calls,
            },
            Matrix {
                service: "messaging",
                creds: vec![Cred::tenant("A's client secret", &self.a.secret)],
                unauthorized: invalid_client,
                calls: token_calls,
            },
        ]
    }
}

/// A listing of the caller's own: any 200 that shows nothing of B's.
fn listed() -> Expect {
    Expect {
        status: 200,
        body: None,
    }
}

// ---- Model serving ----

const A_ENDPOINT: &str = "tenant-a-endpoint";
const B_ENDPOINT: &str = "tenant-b-endpoint";
const B_EMPTY: &str = "tenant-b-empty-endpoint";
const GONE: &str = "tenant-gone-endpoint";
const B_DEPLOYMENT: &str = "tenant-b-deployment";

/// A's and B's endpoints, each with a deployment of a real instance; B's second endpoint
/// with none; an endpoint deleted since. B's key was reissued once.
struct Serving {
    a_key: String,
    b_key: String,
    b_replaced_key: String,
    gone_key: String,
    b_instance: String,
}

impl Serving {
    fn new(ctx: &Ctx) -> Self {
        let instance = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../kep-serving/tests/instance.py"
        );
        ctx.admin(
            "POST",
            "/admin/v1/serving/images",
            Some(json!({"name": "isolation-py", "command": ["python3", instance]})),
        );
        let endpoint = |name: &str| {
            ctx.admin(
                "POST",
                "/admin/v1/serving/endpoints",
                Some(json!({"name": name})),
            )["api_key"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let (a_key, b_replaced_key, gone_key) =
            (endpoint(A_ENDPOINT), endpoint(B_ENDPOINT), endpoint(GONE));
        endpoint(B_EMPTY);
        ctx.admin(
            "DELETE",
            &format!("/admin/v1/serving/endpoints/{GONE}"),
            None,
        );
        let b_key = ctx.admin(
            "POST",
            &format!("/admin/v1/serving/endpoints/{B_ENDPOINT}/api-key"),
            None,
        )["api_key"]
            .as_str()
            .unwrap()
            .to_owned();
        for (e, d) in [
            (A_ENDPOINT, "tenant-a-deployment"),
            (B_ENDPOINT, B_DEPLOYMENT),
        ] {
            ctx.admin(
                "POST",
                &format!("/admin/v1/serving/endpoints/{e}/deployments"),
                // No readiness probe: the default, a TCP connect, holds on a loaded machine.
                Some(
                    json!({"name": d, "type": "custom-image", "image": "isolation-py", "env": {"NAME": d}}),
                ),
            );
            wait_available(ctx.srv, e, d);
        }
        let serving = Serving {
            b_instance: ctx.admin("GET", &Serving::b_deployment(), None)["instances"][0]["id"]
                .as_str()
                .unwrap()
                .to_owned(),
            a_key,
            b_key,
            b_replaced_key,
            gone_key,
        };
        let own = serving
            .gateway(ctx, A_ENDPOINT, &serving.a_key, "/hello")
            .ok("A's own endpoint");
        assert_eq!(own["name"], "tenant-a-deployment");
        serving
    }

    fn b_deployment() -> String {
        format!("/admin/v1/serving/endpoints/{B_ENDPOINT}/deployments/{B_DEPLOYMENT}")
    }

    fn gateway(&self, ctx: &Ctx, endpoint: &str, key: &str, path: &str) -> Answer {
        Answer::of(
            ctx.client
                .get(ctx.url("gateway", &format!("/endpoints/{endpoint}{path}")))
                .bearer_auth(key),
        )
    }

    /// B's deployment as the operator sees it, less what its probes move (its state, its
    /// instances' readiness), and how many calls its instance has served (its `/stats`,
    /// which does not count itself): none of A's may have reached it.
    fn state(&self, ctx: &Ctx) -> Value {
        let mut deployment = ctx.admin("GET", &Serving::b_deployment(), None);
        deployment.as_object_mut().unwrap().remove("state");
        for instance in deployment["instances"].as_array_mut().unwrap() {
            let instance = instance.as_object_mut().unwrap();
            instance.remove("state");
            instance.remove("ready");
        }
        json!({
            "deployment": deployment,
            "served": self.gateway(ctx, B_ENDPOINT, &self.b_key, "/stats").ok("B's stats"),
        })
    }

    fn matrices<'a>(&self, ctx: &'a Ctx) -> Vec<Matrix<'a>> {
        let unauthorized = expect(
            401,
            r#"{"error":{"code":"unauthorized","message":"no endpoint of this name accepts this API key"}}"#,
        );
        let endpoints = || -> Vec<Object> {
            [
                ("B's endpoint", B_ENDPOINT),
                ("B's endpoint without a deployment", B_EMPTY),
                ("a deleted endpoint", GONE),
            ]
            .into_iter()
            .map(|(name, e)| {
                object(
                    name,
                    ids(&[("endpoint", e)]),
                    ids(&[("endpoint", "no-such-endpoint")]),
                )
            })
            .collect()
        };
        let calls = [
            ("GET", "", Body::Empty),
            ("GET", "/", Body::Empty),
            ("GET", "/v2/models/m", Body::Empty),
            (
                "POST",
                "/v2/models/m/infer",
                Body::Json(r#"{"inputs":[]}"#.into()),
            ),
            ("PUT", "/anything", Body::Json("{}".into())),
            ("DELETE", "/anything", Body::Empty),
        ]
        .into_iter()
        .map(|(method, path, body)| {
            let url = ctx.url("gateway", &format!("/endpoints/{{endpoint}}{path}"));
            call(
                format!("{method} /endpoints/{{endpoint}}{path}"),
                ctx.send("Bearer", method, url, &[], body),
                endpoints(),
                unauthorized.clone(),
            )
        })
        .collect();
        vec![Matrix {
            service: "serving gateway",
            creds: vec![
                Cred::tenant("A's API key", &self.a_key),
                Cred::stranger("no key", None),
                Cred::stranger("a deleted endpoint's key", Some(&self.gone_key)),
                Cred::stranger("B's key before its reissue", Some(&self.b_replaced_key)),
                Cred::stranger("the operator token", Some(&ctx.operator)),
            ],
            unauthorized,
            calls,
        }]
    }
}

// ---- The operator API ----

/// Every `/admin/v1` call of the operator API's document, on B's objects, with each of A's
/// credentials: every one is the operator's 401.
fn operator_matrix<'a>(
    ctx: &'a Ctx,
    creds: Vec<Cred>,
    b: impl Fn(&str, &str) -> String,
) -> Matrix<'a> {
    let doc =
        Answer::of(ctx.client.get(ctx.url("admin", "/openapi/admin.json"))).ok("the document");
    let unauthorized = expect(
        401,
        r#"{"error":{"code":"unauthorized","message":"a valid operator token is required"}}"#,
    );
    let mut calls = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/admin/v1/") {
            continue;
        }
        let params: Vec<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        let theirs: Ids = params
            .iter()
            .map(|p| ((*p).to_owned(), b(path, p)))
            .collect();
        let missing: Ids = params
            .iter()
            .map(|p| ((*p).to_owned(), "999999999".to_owned()))
            .collect();
        for method in item.as_object().unwrap().keys() {
            let body = match method.as_str() {
                "post" | "put" | "patch" => Body::Json("{}".into()),
                _ => Body::Empty,
            };
            calls.push(call(
                format!("{} {path}", method.to_uppercase()),
                ctx.send("Bearer", method, ctx.url("admin", path), &[], body),
                vec![object("B's objects", theirs.clone(), missing.clone())],
                unauthorized.clone(),
            ));
        }
    }
    assert!(calls.len() >= 40, "{} operator calls", calls.len());
    Matrix {
        service: "operator API",
        creds,
        unauthorized,
        calls,
    }
}

#[test]
fn a_tenant_reaches_nothing_of_another_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let srv = StopsGracefully(serve(
        dir.path(),
        &port0(),
        // Nothing of B's may lapse by itself while the test runs on a loaded machine: B's
        // open result group, pending DRM session, and a Provision's two steps.
        &[
            ("KEP_SIMULATOR_DELAY_MS", "10"),
            ("KEP_MESSAGING_RESULTS_LEASE_S", "3600"),
            ("KEP_ADAPTER_SESSION_TTL_S", "3600"),
            ("KEP_LIVE_PROVISION_WINDOW_S", "60"),
        ],
    ));
    let ctx = Ctx {
        srv: &srv.0,
        client: Client::new(),
        operator: std::fs::read_to_string(dir.path().join("admin-token"))
            .unwrap()
            .trim()
            .to_owned(),
    };

    let (live_a, live_b) = (
        live_tenant(&ctx, "tenant-a-live"),
        live_tenant(&ctx, "tenant-b-live"),
    );
    let mut rooms = Rooms::new(&ctx, &live_a, &live_b);
    let adapter = Adapter::new(&ctx);
    let messaging = Messaging::new(&ctx);
    let serving = Serving::new(&ctx);

    // Everything of B's that no answer to A may carry (not B's cids: A sends with them on
    // purpose, as keys of its own).
    let mut markers: Vec<String> = [
        &live_b.service,
        &live_b.admin_secret,
        &live_b.service_secret,
        &live_b.token,
        &adapter.b.secret,
        &messaging.b.client,
        &messaging.b.secret,
        &messaging.b.token,
        &messaging.rcs_file,
        &messaging.mms_group,
        &messaging.completed_group,
        &messaging.open_group,
        &serving.b_key,
        &serving.b_replaced_key,
        &serving.b_instance,
    ]
    .map(String::clone)
    .into();
    markers.extend(
        [
            ROOM,
            "b-part-one",
            "b-part-two",
            "b-part-three",
            "b-sync-option-marker",
            "b-user-marker",
            B_RELEASED,
            B_PHONE,
            "b-text-marker",
            "b-title-marker",
            "b-card-marker",
            "b-upload-marker",
            B_ENDPOINT,
            B_EMPTY,
            B_DEPLOYMENT,
        ]
        .map(str::to_owned),
    );
    for (_, session, file) in &adapter.sessions {
        markers.extend([session.clone(), file.clone()]);
    }
    markers.extend(messaging.messages.iter().map(|m| m.2.clone()));

    let state = || {
        json!({
            "live": live_state(&ctx, &live_b),
            "adapter": adapter.state(&ctx),
            "messaging": messaging.state(&ctx),
            "serving": serving.state(&ctx),
        })
    };
    let before = state();

    let a_creds = vec![
        Cred::stranger("A's live admin secret", Some(&live_a.admin_secret)),
        Cred::stranger("A's live service secret", Some(&live_a.service_secret)),
        Cred::stranger("A's room token", Some(&live_a.token)),
        Cred::stranger("A's org secret key", Some(&adapter.a.secret)),
        Cred::stranger("A's messaging client secret", Some(&messaging.a.secret)),
        Cred::stranger("A's access token", Some(&messaging.a.token)),
        Cred::stranger("A's endpoint API key", Some(&serving.a_key)),
    ];
    let b_object = |path: &str, param: &str| -> String {
        let area = path.split('/').nth(3).unwrap();
        match (area, param) {
            ("live", "id") => live_b.service.clone(),
            ("adapter", "id") => adapter.b.id.clone(),
            ("adapter", "session") => adapter.sessions[0].1.clone(),
            ("messaging", "id") => messaging.b.client.clone(),
            ("serving", "endpoint") => B_ENDPOINT.into(),
            ("serving", "deployment") => B_DEPLOYMENT.into(),
            ("serving", "instance") => serving.b_instance.clone(),
            // Images and models are the operator's, no tenant's: one in use by B's deployment.
            ("serving", "name") => "isolation-py".into(),
            other => panic!("{path}: a parameter this test does not know: {other:?}"),
        }
    };
    let mut total = 0;
    for (service, matrices) in [
        ("live", live_matrices(&ctx, &rooms, &live_a, &live_b)),
        ("adapter", adapter.matrices(&ctx)),
        ("messaging", messaging.matrices(&ctx)),
        ("serving", serving.matrices(&ctx)),
        (
            "operator API",
            vec![operator_matrix(&ctx, a_creds, b_object)],
        ),
    ] {
        let cases: usize = matrices.iter().map(|m| m.run(&markers)).sum();
        eprintln!("isolation: {service}: {cases} cases");
        total += cases;
    }
    eprintln!("isolation: {total} cases in all");

    assert_eq!(
        state(),
        before,
        "B's objects, read back with B's credentials"
    );
    rooms.nothing_reached_b();
    provision(&ctx, &live_b.service, &live_b.admin_secret).json()["result"]["token"]
        .as_str()
        .expect("B's admin secret still provisions");
    adapter.b_finishes(&ctx);
    messaging.b_finishes(&ctx);
}
