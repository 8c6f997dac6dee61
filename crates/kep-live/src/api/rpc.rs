//! `POST /api/rpc`: the JSON-RPC 2.0 envelope, the operations of seed 000, and their answers.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use std::borrow::Cow;

use serde_json::value::RawValue;

use super::wire::{
    DestroyRoomResult, ParticipantTarget, ProvisionParams, RoomParams, StreamTarget, TargetsParams,
    VersionParams,
};
use super::{check_id, parse_params};
use crate::{LiveError, LiveService};

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
            "Room.KickParticipant" => {
                let mut p: TargetsParams<ParticipantTarget> = parse_params(params)?;
                p.targets = dedup(p.targets);
                check_targets(p.targets.len(), max_targets)?;
                for (i, t) in p.targets.iter().enumerate() {
                    check_id(&format!("targets[{i}].participantId"), &t.participant_id)?;
                }
                R::KickParticipant(p)
            }
            // `Room.InactivateStream` is the spelling of the service's later API version.
            "Room.InactiveStream" | "Room.InactivateStream" => {
                let mut p: TargetsParams<StreamTarget> = parse_params(params)?;
                p.targets = dedup(p.targets);
                check_targets(p.targets.len(), max_targets)?;
                for (i, t) in p.targets.iter().enumerate() {
                    check_id(&format!("targets[{i}].participantId"), &t.participant_id)?;
                }
                R::InactiveStream(p)
            }
            other => return Err(LiveError::MethodNotFound(other.to_owned())),
        };
        match &op {
            R::ListParticipants(p) | R::DestroyRoom(p) => check_id("roomId", &p.room_id)?,
            R::KickParticipant(p) => check_id("roomId", &p.room_id)?,
            R::InactiveStream(p) => check_id("roomId", &p.room_id)?,
            R::ListRooms => {}
        }
        Ok(Operation::Room(op))
    }
}

/// A JSON-RPC request, borrowed from the body.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

fn dedup<T: Eq + std::hash::Hash + Clone>(targets: Vec<T>) -> Vec<T> {
    let mut seen = std::collections::HashSet::new();
    targets
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

fn check_targets(n: usize, max: usize) -> Result<(), LiveError> {
    if n == 0 {
        return Err(LiveError::invalid_params(
            "targets",
            "must name at least one target",
        ));
    }
    if n > max {
        return Err(LiveError::invalid_params(
            "targets",
            format!("at most {max} targets per call"),
        ));
    }
    Ok(())
}

/// `POST /api/rpc`: Provision and every Room method.
#[utoipa::path(
    post,
    path = "/api/rpc",
    request_body(content = Object, description = "A JSON-RPC 2.0 request: `Provision`, `Room.ListRooms`, `Room.ListParticipants`, `Room.DestroyRoom`, `Room.KickParticipant`, `Room.InactiveStream` (also `Room.InactivateStream`)"),
    responses(
        (status = 200, description = "A JSON-RPC answer, `result` or `error`", body = super::wire::RpcResponse),
        (status = 413, description = "Body over the size limit", body = super::wire::RpcResponse),
        (status = 415, description = "Content-Type is not application/json", body = super::wire::RpcResponse),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn rpc(
    State(live): State<LiveService>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut id = String::from("null");
    let outcome = handle(&live, &headers, body, &mut id).await;
    let (status, text) = match outcome {
        Ok(result) => (
            axum::http::StatusCode::OK,
            envelope(&id, "result", result.as_str()),
        ),
        Err(err) => {
            let error = err.to_error_object().to_string();
            (err.http_status(), envelope(&id, "error", &error))
        }
    };
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        text,
    )
        .into_response()
}

fn envelope(id: &str, key: &str, json: &str) -> String {
    let mut out = String::with_capacity(json.len() + id.len() + 32);
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(id);
    out.push_str(r#",""#);
    out.push_str(key);
    out.push_str(r#"":"#);
    out.push_str(json);
    out.push('}');
    out
}

/// A result's JSON: built for this call, or shared (a room's cached listing).
enum ResultJson {
    Owned(String),
    Shared(Arc<str>),
}

impl ResultJson {
    fn as_str(&self) -> &str {
        match self {
            ResultJson::Owned(s) => s,
            ResultJson::Shared(s) => s,
        }
    }
}

/// Runs one call; on success the JSON of its `result`. `id` is filled in as soon as known.
async fn handle(
    live: &LiveService,
    headers: &HeaderMap,
    body: Body,
    id: &mut String,
) -> Result<ResultJson, LiveError> {
    let json_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return Err(LiveError::UnsupportedMediaType);
    }
    let limit = live.0.settings.body_limit_bytes;
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(LiveError::PayloadTooLarge { limit });
        }
        Err(e) => {
            return Err(LiveError::InvalidRequest(format!(
                "reading the body failed: {e}"
            )));
        }
    };
    // Borrowed pieces of the envelope: nothing is copied before the method is known.
    let envelope: Envelope = serde_json::from_slice(&bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => LiveError::InvalidRequest(
            "the body must be one JSON-RPC request object (batches are not supported)".into(),
        ),
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
    if envelope.jsonrpc.as_deref() != Some("2.0") {
        return Err(LiveError::InvalidRequest(
            "`jsonrpc` must be \"2.0\"".into(),
        ));
    }
    let Some(method) = envelope.method else {
        return Err(LiveError::InvalidRequest(
            "`method` must be a string".into(),
        ));
    };
    let params = match envelope.params.map(|raw| raw.get()) {
        None => "{}",
        Some(raw) if raw.starts_with('{') => raw,
        Some(_) => return Err(LiveError::invalid_params("params", "must be an object")),
    };
    let op = Operation::parse(&method, params, live.0.settings.max_targets)?;
    execute(live, headers, op).await
}

async fn execute(
    live: &LiveService,
    headers: &HeaderMap,
    op: Operation,
) -> Result<ResultJson, LiveError> {
    let live = &live.0;
    let op = match op {
        Operation::Provision(params) => {
            let result = live.provisioner.provision(&live.access, params).await?;
            let json = serde_json::to_string(&result).expect("result serialises");
            return Ok(ResultJson::Owned(json));
        }
        Operation::Room(op) => op,
    };
    let service = authorize(live, headers)?;
    let rooms = &live.rooms;
    let json = match op {
        RoomOperation::ListRooms => {
            serde_json::to_string(&rooms.list_rooms(&service)).expect("serialises")
        }
        RoomOperation::ListParticipants(p) => {
            return Ok(ResultJson::Shared(
                rooms.list_participants(&service, &p.room_id)?,
            ));
        }
        RoomOperation::DestroyRoom(p) => {
            rooms.destroy(&service, &p.room_id)?;
            serde_json::to_string(&DestroyRoomResult { room_id: p.room_id }).expect("serialises")
        }
        RoomOperation::KickParticipant(p) => {
            rooms.kick(&service, &p.room_id, &p.targets)?;
            "{}".to_owned()
        }
        RoomOperation::InactiveStream(p) => {
            rooms.inactivate(&service, &p.room_id, &p.targets)?;
            "{}".to_owned()
        }
    };
    Ok(ResultJson::Owned(json))
}

/// The service of the call's admin token.
fn authorize(live: &crate::Live, headers: &HeaderMap) -> Result<Arc<str>, LiveError> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|token| live.access.authorize(token.trim()))
        .ok_or(LiveError::Unauthorized { nonce: None })
}
