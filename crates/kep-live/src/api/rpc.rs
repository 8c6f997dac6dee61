//! `POST /api/rpc`: the JSON-RPC 2.0 envelope, the operations of seed 000, and their answers.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use kep_core::limits::{Key, Peer};
use std::borrow::Cow;

use serde_json::value::RawValue;

use super::parse_params;
use crate::ids::{RoomId, check_id};
use crate::{LiveError, LiveService};
use kep_api::live::paths;
use kep_api::live::{
    DestroyRoomResult, ParticipantTarget, ProvisionParams, RoomParams, StreamTarget, TargetsParams,
    VersionParams,
};

/// Every method of the API, named as the seed names it.
#[derive(Debug)]
enum Operation {
    Provision(ProvisionParams),
    Room(RoomOperation),
}

/// The `Room.*` methods, which need an admin token.
#[derive(Debug)]
enum RoomOperation {
    ListRooms,
    ListParticipants(RoomParams),
    DestroyRoom(RoomParams),
    KickParticipant(TargetsParams<ParticipantTarget>),
    InactiveStream(TargetsParams<StreamTarget>),
}

impl Operation {
    /// Maps a method and its params onto an operation; params are checked here, before any
    /// lookup.
    fn parse(method: &str, params: &str, max_targets: usize) -> Result<Self, LiveError> {
        use RoomOperation as R;
        if method == "Provision" {
            let p: ProvisionParams = parse_params(params)?;
            check_id("serviceId", &p.service_id)?;
            return Ok(Operation::Provision(p));
        }
        let op = match method {
            "Room.ListRooms" => {
                parse_params::<VersionParams>(params)?;
                R::ListRooms
            }
            "Room.ListParticipants" => R::ListParticipants(parse_params(params)?),
            "Room.DestroyRoom" => R::DestroyRoom(parse_params(params)?),
            "Room.KickParticipant" => R::KickParticipant(parse_targets(params, max_targets)?),
            // `Room.InactivateStream` is the spelling of the service's later API version.
            "Room.InactiveStream" | "Room.InactivateStream" => {
                R::InactiveStream(parse_targets(params, max_targets)?)
            }
            other => return Err(LiveError::MethodNotFound(other.to_owned())),
        };
        if let R::ListParticipants(p) | R::DestroyRoom(p) = &op {
            check_id("roomId", &p.room_id)?;
        }
        Ok(Operation::Room(op))
    }
}

/// A target of a Kick or Inactivate call.
pub(crate) trait Target: serde::de::DeserializeOwned + Eq + std::hash::Hash + Clone {
    fn participant_id(&self) -> &str;
}

impl Target for ParticipantTarget {
    fn participant_id(&self) -> &str {
        &self.participant_id
    }
}

impl Target for StreamTarget {
    fn participant_id(&self) -> &str {
        &self.participant_id
    }
}

/// Params with `targets`, checked by [`check_targets`].
fn parse_targets<T: Target>(params: &str, max: usize) -> Result<TargetsParams<T>, LiveError> {
    let mut p: TargetsParams<T> = parse_params(params)?;
    check_id("roomId", &p.room_id)?;
    check_targets(&mut p.targets, max)?;
    Ok(p)
}

/// Drops duplicate targets, then requires 1 to `max` of them, each id well-formed: the rule
/// of the JSON-RPC calls and of the operator's.
pub(crate) fn check_targets<T: Target>(targets: &mut Vec<T>, max: usize) -> Result<(), LiveError> {
    let mut seen = std::collections::HashSet::new();
    targets.retain(|t| seen.insert(t.clone()));
    if targets.is_empty() {
        return Err(LiveError::invalid_params(
            "targets",
            "must name at least one target",
        ));
    }
    if targets.len() > max {
        return Err(LiveError::invalid_params(
            "targets",
            format!("at most {max} targets per call"),
        ));
    }
    for (i, t) in targets.iter().enumerate() {
        check_id(&format!("targets[{i}].participantId"), t.participant_id())?;
    }
    Ok(())
}

/// A JSON-RPC request, borrowed from the body.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    // Raw, so that a member of the wrong type is refused naming it, with the request's id.
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// `POST /api/rpc`: Provision and every Room method.
#[utoipa::path(
    post,
    path = paths::RPC,
    request_body(content = RpcCall, description = "A JSON-RPC 2.0 request: `Provision`, `Room.ListRooms`, `Room.ListParticipants`, `Room.DestroyRoom`, `Room.KickParticipant`, `Room.InactiveStream` (also `Room.InactivateStream`)"),
    responses(
        (status = 200, description = "A JSON-RPC answer, `result` or `error`; for a batch, the array of its answers", body = kep_api::live::RpcReply),
        (status = 413, description = "Body over the size limit", body = kep_api::live::RpcResponse),
        (status = 415, description = "Content-Type is not application/json", body = kep_api::live::RpcResponse),
    ),
    // `Provision` takes no token; the `Room.*` methods answer -11002 without one.
    security((), ("bearer" = []))
)]
pub(crate) async fn rpc(State(live): State<LiveService>, req: Request) -> Response {
    // The request taken whole: a `HeaderMap` extractor would clone every header.
    let (parts, body) = req.into_parts();
    // The token says who calls before the body is read, so the limits come first; a call
    // without a valid token (Provision among them) counts against its peer.
    let service = token_service(&live.0, &parts.headers);
    let key = match &service {
        Some(service) => Key::Client(Arc::clone(service)),
        None => Key::peer(Peer::of(&parts.extensions)),
    };
    let reply = match live.0.limiter.admit(key) {
        Ok(_in_flight) => match read_body(&live, &parts.headers, body).await {
            Ok(bytes) if bytes.trim_ascii_start().starts_with(b"[") => {
                batch(&live, service, &bytes).await
            }
            Ok(bytes) => {
                let mut id = String::from("null");
                let outcome = call(&live, service, &bytes, &mut id).await;
                Reply::One(id, outcome)
            }
            Err(e) => Reply::One("null".into(), Err(e)),
        },
        Err(refusal) => Reply::One("null".into(), Err(refusal.into())),
    };
    let mut retry_after = None;
    let (status, body) = match reply {
        Reply::One(id, Ok(result)) => (StatusCode::OK, Body::new(Answer::new(&id, Ok(result)))),
        Reply::One(id, Err(err)) => {
            retry_after = err.refusal().cloned();
            (err.http_status(), Body::new(Answer::new(&id, Err(err))))
        }
        Reply::Batch(answers) => (StatusCode::OK, Body::from(answers)),
    };
    let mut res = Response::new(body);
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(refusal) = retry_after {
        refusal.set_retry_after(res.headers_mut());
    }
    res
}

/// What a POST is answered: one call's outcome with its id, or a batch's array of answers.
enum Reply {
    One(String, Result<Bytes, LiveError>),
    Batch(Vec<u8>),
}

/// A batch (JSON-RPC 2.0 §6): each call is run in turn and answered in the array, in
/// order; an empty array is one -32600, not an empty array.
async fn batch(live: &LiveService, service: Option<Arc<str>>, bytes: &[u8]) -> Reply {
    let calls: Vec<&RawValue> = match serde_json::from_slice(bytes) {
        Ok(calls) => calls,
        Err(e) => return Reply::One("null".into(), Err(LiveError::Parse(e.to_string()))),
    };
    if calls.is_empty() {
        let empty = LiveError::InvalidRequest("an empty batch".into());
        return Reply::One("null".into(), Err(empty));
    }
    let mut answers = Vec::with_capacity(bytes.len());
    for (i, raw) in calls.into_iter().enumerate() {
        answers.push(if i == 0 { b'[' } else { b',' });
        let mut id = String::from("null");
        let outcome = call(live, service.clone(), raw.get().as_bytes(), &mut id).await;
        for piece in Answer::new(&id, outcome).pieces {
            answers.extend_from_slice(&piece);
        }
    }
    answers.push(b']');
    Reply::Batch(answers)
}

/// Any other method on `/api/rpc`: 405, with a JSON-RPC error as the body.
pub(crate) async fn not_post() -> Response {
    let err = LiveError::MethodNotAllowed;
    let status = err.http_status();
    let mut res = Response::new(Body::new(Answer::new("null", Err(err))));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    res
}

/// The request body's schema: one request object per method, with that method's params, or
/// a batch of them.
/// Every answer to it is HTTP 200 (a JSON-RPC `error` included), so a body outside this
/// schema is answered -32600, -32601 or -32602, not refused at the HTTP level.
pub(crate) struct RpcCall;

impl utoipa::PartialSchema for RpcCall {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use serde_json::json;
        let schema = |name: &str| json!({ "$ref": format!("#/components/schemas/{name}") });
        let targets = |target: &str| {
            json!({
                "type": "object",
                "required": ["roomId", "targets"],
                "properties": {
                    "version": { "type": "string" },
                    "roomId": { "type": "string" },
                    "targets": { "type": "array", "items": schema(target) },
                },
            })
        };
        let call = |methods: &[&str], params: serde_json::Value| {
            json!({
                "type": "object",
                "required": ["jsonrpc", "id", "method", "params"],
                "properties": {
                    "jsonrpc": { "type": "string", "enum": ["2.0"] },
                    "id": { "type": ["string", "integer"] },
                    "method": { "type": "string", "enum": methods },
                    "params": params,
                },
            })
        };
        let calls = [
            call(&["Provision"], schema("ProvisionParams")),
            call(&["Room.ListRooms"], schema("VersionParams")),
            call(
                &["Room.ListParticipants", "Room.DestroyRoom"],
                schema("RoomParams"),
            ),
            call(&["Room.KickParticipant"], targets("ParticipantTarget")),
            call(
                &["Room.InactiveStream", "Room.InactivateStream"],
                targets("StreamTarget"),
            ),
        ];
        // One call, or a batch (JSON-RPC 2.0 §6): an array of request objects, each answered
        // as if alone (so each is any object here; spelling out the calls again makes the
        // schema fuzzer's generator crash).
        let batch = json!({ "type": "array", "minItems": 1, "items": { "type": "object" } });
        let mut body = json!({ "oneOf": calls });
        body["oneOf"].as_array_mut().expect("an array").push(batch);
        serde_json::from_value(body).expect("the request schema is a schema")
    }
}

impl utoipa::ToSchema for RpcCall {}

/// A JSON-RPC answer as three pieces (head with the id, the member's JSON, `}`), so that a
/// shared result such as a room's cached listing goes out without being copied.
struct Answer {
    pieces: [Bytes; 3],
    next: usize,
}

impl Answer {
    fn new(id: &str, outcome: Result<Bytes, LiveError>) -> Self {
        let (key, json) = match outcome {
            Ok(result) => ("result", result),
            Err(err) => ("error", Bytes::from(err.to_error_object().to_string())),
        };
        let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"{key}":"#);
        Answer {
            pieces: [Bytes::from(head), json, Bytes::from_static(b"}")],
            next: 0,
        }
    }
}

impl http_body::Body for Answer {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let i = self.next;
        self.next += 1;
        std::task::Poll::Ready(
            self.pieces
                .get_mut(i)
                .map(|p| Ok(http_body::Frame::data(std::mem::take(p)))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.next >= self.pieces.len()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(
            self.pieces[self.next.min(3)..]
                .iter()
                .map(|p| p.len() as u64)
                .sum(),
        )
    }
}

/// The body of a call declared as JSON, within the body limit.
async fn read_body(
    live: &LiveService,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, LiveError> {
    if !kep_core::http::content_type_is(headers, "application/json") {
        return Err(LiveError::UnsupportedMediaType("application/json"));
    }
    let limit = live.0.settings.body_limit_bytes;
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(LiveError::PayloadTooLarge { limit })
        }
        Err(e) => Err(LiveError::InvalidRequest(format!(
            "reading the body failed: {e}"
        ))),
    }
}

/// Runs one call of `service` (the token's, if it had a valid one); on success the JSON of
/// its `result`. `id` is filled in as soon as known.
async fn call(
    live: &LiveService,
    service: Option<Arc<str>>,
    bytes: &[u8],
    id: &mut String,
) -> Result<Bytes, LiveError> {
    // Borrowed pieces of the envelope: nothing is copied before the method is known.
    let envelope: Envelope = serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            LiveError::InvalidRequest("a JSON-RPC request must be an object".into())
        }
        _ => LiveError::Parse(e.to_string()),
    })?;
    match envelope.id.map(|raw| raw.get()) {
        Some(raw)
            if raw.starts_with(['"', '-']) || raw.starts_with(|c: char| c.is_ascii_digit()) =>
        {
            raw.clone_into(id);
        }
        _ => {
            return Err(LiveError::InvalidRequest(
                "`id` must be a string or a number".into(),
            ));
        }
    }
    if envelope.jsonrpc.and_then(string).as_deref() != Some("2.0") {
        return Err(LiveError::InvalidRequest(
            "`jsonrpc` must be \"2.0\"".into(),
        ));
    }
    let Some(method) = envelope.method.and_then(string) else {
        return Err(LiveError::InvalidRequest(
            "`method` must be a string".into(),
        ));
    };
    // The seed requires `params` of every method (`{}` where a method takes none); JSON's
    // `null` is no params.
    let params = match envelope.params.map(|raw| raw.get()) {
        None => return Err(LiveError::invalid_params("params", "required")),
        Some(raw) if raw.starts_with('{') => raw,
        Some(_) => return Err(LiveError::invalid_params("params", "must be an object")),
    };
    let outcome = match Operation::parse(&method, params, live.0.settings.max_targets) {
        Ok(op) => execute(live, service, op).await,
        Err(e) => Err(e),
    };
    crate::metrics::rpc_call(Some(&method), &outcome);
    outcome
}

/// A member that is a JSON string, borrowed where it has no escapes.
fn string(raw: &RawValue) -> Option<Cow<'_, str>> {
    let json = raw.get();
    if let Ok(s) = serde_json::from_str::<&str>(json) {
        return Some(Cow::Borrowed(s));
    }
    serde_json::from_str::<String>(json).ok().map(Cow::Owned)
}

async fn execute(
    live: &LiveService,
    service: Option<Arc<str>>,
    op: Operation,
) -> Result<Bytes, LiveError> {
    let live = &live.0;
    let op = match op {
        Operation::Provision(params) => {
            let result = live.provisioner.provision(&live.access, params).await?;
            return Ok(Bytes::from(
                serde_json::to_vec(&result).expect("result serialises"),
            ));
        }
        Operation::Room(op) => op,
    };
    let service = service.ok_or(LiveError::Unauthorized { nonce: None })?;
    let rooms = &live.room_methods;
    let json = match op {
        RoomOperation::ListRooms => {
            serde_json::to_string(&rooms.list_rooms(&service).await?).expect("serialises")
        }
        RoomOperation::ListParticipants(p) => {
            return rooms.list_participants(&service, &p.room_id.into()).await;
        }
        RoomOperation::DestroyRoom(p) => {
            let room_id = RoomId::from(p.room_id);
            rooms.destroy(&service, &room_id).await?;
            let result = DestroyRoomResult {
                room_id: room_id.into_string(),
            };
            serde_json::to_string(&result).expect("serialises")
        }
        RoomOperation::KickParticipant(p) => {
            rooms.kick(&service, &p.room_id.into(), &p.targets).await?;
            "{}".to_owned()
        }
        RoomOperation::InactiveStream(p) => {
            rooms
                .inactivate(&service, &p.room_id.into(), &p.targets)
                .await?;
            "{}".to_owned()
        }
    };
    Ok(Bytes::from(json))
}

/// The service of the call's admin token, if it has a valid one.
fn token_service(live: &crate::Live, headers: &HeaderMap) -> Option<Arc<str>> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| kep_core::http::credentials(v, "Bearer"))
        .and_then(|token| live.access.authorize(token))
}
