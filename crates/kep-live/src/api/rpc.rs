//! `POST /api/rpc`: the JSON-RPC 2.0 envelope, the operations of seed 000, and their answers.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use serde_json::Value;

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
    fn parse(method: &str, params: Value, max_targets: usize) -> Result<Self, LiveError> {
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
    let mut id = Value::Null;
    let outcome = handle(&live, &headers, body, &mut id).await;
    let (status, text) = match outcome {
        Ok(result) => (axum::http::StatusCode::OK, envelope(&id, "result", &result)),
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

fn envelope(id: &Value, key: &str, json: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"{key}":{json}}}"#)
}

/// Runs one call; on success the JSON of its `result`. `id` is filled in as soon as known.
async fn handle(
    live: &LiveService,
    headers: &HeaderMap,
    body: Body,
    id: &mut Value,
) -> Result<String, LiveError> {
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
    let request: Value =
        serde_json::from_slice(&bytes).map_err(|e| LiveError::Parse(e.to_string()))?;
    let Value::Object(mut request) = request else {
        return Err(LiveError::InvalidRequest(
            "the body must be one JSON-RPC request object (batches are not supported)".into(),
        ));
    };
    match request.remove("id") {
        Some(v @ (Value::String(_) | Value::Number(_))) => *id = v,
        _ => {
            return Err(LiveError::InvalidRequest(
                "`id` must be a string or a number".into(),
            ));
        }
    }
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(LiveError::InvalidRequest(
            "`jsonrpc` must be \"2.0\"".into(),
        ));
    }
    let Some(Value::String(method)) = request.remove("method") else {
        return Err(LiveError::InvalidRequest(
            "`method` must be a string".into(),
        ));
    };
    let params = match request.remove("params") {
        None => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => return Err(LiveError::invalid_params("params", "must be an object")),
    };
    let op = Operation::parse(&method, params, live.0.settings.max_targets)?;
    execute(live, headers, op).await
}

async fn execute(
    live: &LiveService,
    headers: &HeaderMap,
    op: Operation,
) -> Result<String, LiveError> {
    let live = &live.0;
    let op = match op {
        Operation::Provision(params) => {
            let result = live.provisioner.provision(&live.access, params).await?;
            return Ok(serde_json::to_string(&result).expect("result serialises"));
        }
        Operation::Room(op) => op,
    };
    let service = authorize(live, headers)?;
    let rooms = &live.rooms;
    Ok(match op {
        RoomOperation::ListRooms => {
            serde_json::to_string(&rooms.list_rooms(&service)).expect("serialises")
        }
        RoomOperation::ListParticipants(p) => {
            rooms.list_participants(&service, &p.room_id)?.to_string()
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
    })
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
