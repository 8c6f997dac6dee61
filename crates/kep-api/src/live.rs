//! Wire types of the live API, shared by the server, the client crate and the CLI.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

// ---- operator API (admin listener) ----

/// `POST /admin/v1/live/services`
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateServiceRequest {
    /// Generated when absent: letters, digits, `.`, `_`, `-`, at most 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub service_id: Option<String>,
    /// Where `scheme: external` provisioning is verified (an http URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^https?://")]
    pub external_verifier_url: Option<String>,
    /// Generated when absent: 8 to 256 printable ASCII characters (a CI's fixed secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[ -~]{8,256}$")]
    pub admin_secret: Option<String>,
    /// Generated when absent: 8 to 256 printable ASCII characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[ -~]{8,256}$")]
    pub service_secret: Option<String>,
}

/// The secrets are shown here once and never again.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSecrets {
    pub service_id: String,
    pub admin_secret: String,
    pub service_secret: String,
}

/// `GET /admin/v1/live/services/{id}`
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSummary {
    pub service_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_verifier_url: Option<String>,
}

/// `GET /admin/v1/live/services`: the service ids, in creation order.
pub type ServiceList = Vec<String>;

/// `PATCH /admin/v1/live/services/{id}`: `null` removes the verifier.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateServiceRequest {
    #[schema(pattern = "^https?://")]
    pub external_verifier_url: Option<String>,
}

/// `GET /admin/v1/live/services/{id}/rooms`: the service's rooms, by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RoomList {
    pub rooms: Vec<RoomInfo>,
}

/// A room with its participants, as `Room.ListParticipants` lists them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoomInfo {
    pub room_id: String,
    pub participants: Vec<ParticipantInfo>,
}

/// `POST /admin/v1/live/services/{id}/rooms/{room}/kick`: all targets or none.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct KickRequest {
    /// Duplicates count once; at most the server's `max_targets`.
    #[schema(min_items = 1)]
    pub targets: Vec<ParticipantTarget>,
}

/// `POST /admin/v1/live/services/{id}/rooms/{room}/inactivate`: all targets or none.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InactivateRequest {
    /// Duplicates count once; at most the server's `max_targets`.
    #[schema(min_items = 1)]
    pub targets: Vec<StreamTarget>,
}

// ---- JSON-RPC (live listener) ----

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Internal,
    External,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub service_id: String,
    pub scheme: Scheme,
    /// Absent in step 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ProvisionAuth>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProvisionAuth {
    pub nonce: String,
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProvisionResult {
    pub uuid: String,
    pub token: String,
    /// Seconds.
    pub ttl: u64,
    pub api: String,
}

/// Params of `Room.ListRooms`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct VersionParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Params of `Room.ListParticipants` and `Room.DestroyRoom`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoomParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub room_id: String,
}

/// Params of `Room.KickParticipant` and `Room.InactiveStream`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetsParams<T> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub room_id: String,
    pub targets: Vec<T>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParticipantTarget {
    /// 1 to 128 characters, not all blank, none a control character.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub participant_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamTarget {
    /// 1 to 128 characters, not all blank, none a control character.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub participant_id: String,
    pub stream_id: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamInfo {
    pub stream_id: i64,
    /// A WHIP stream's tracks; a stream published over the socket has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tracks: Vec<TrackInfo>,
}

/// A track of a WHIP stream, as its offer's answer set it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TrackInfo {
    /// `audio` or `video`.
    pub kind: String,
    /// The codec the publisher sends: `opus`, `VP8`, `H264`.
    pub codec: String,
    /// The simulcast layers (their `rid`s) a video is sent in; absent when it is one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParticipantInfo {
    pub participant_id: String,
    pub streams: Vec<StreamInfo>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ListParticipantsResult {
    pub participants: Vec<ParticipantInfo>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DestroyRoomResult {
    pub room_id: String,
}

/// A JSON-RPC 2.0 request as the client crate sends it.
#[derive(Debug, Serialize, ToSchema)]
pub struct RpcRequest<P> {
    pub jsonrpc: &'static str,
    pub id: serde_json::Value,
    pub method: &'static str,
    pub params: P,
}

/// A JSON-RPC 2.0 answer: `result` or `error`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RpcResponse {
    pub jsonrpc: String,
    /// The request's `id`; `null` when the request's could not be read.
    #[schema(schema_with = rpc_id)]
    pub id: serde_json::Value,
    /// The method's result: an array of room ids for `Room.ListRooms`, an object otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Value)]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

/// What `POST /api/rpc` answers: one answer, or for a batch the array of its answers in
/// the order of its calls.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RpcReply {
    One(RpcResponse),
    Batch(Vec<RpcResponse>),
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    /// What the error is about: `{nonce}`, `{reason}`, `{method}`, `{field, reason}`,
    /// `{roomId}`, `{missing}` or `{streamId}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub data: Option<serde_json::Value>,
}

/// A JSON-RPC `id` as answered: a string, a number, or `null`.
fn rpc_id() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([
            Type::String,
            Type::Number,
            Type::Null,
        ]))
        .build()
}

// ---- participants (WebSocket `GET /api/ws`) ----

/// What a participant sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ClientMessage {
    Join(Join),
    Publish,
    Unpublish(Unpublish),
    Leave,
}

/// A join: with the challenge answered (`serviceId`, `roomId`, `participantId`?, `value`),
/// or with a join token alone (`token`), which names all three. Its own struct, so that a
/// server parses it alone and names the field at fault.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Join {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unpublish {
    pub stream_id: i64,
}

/// What the server sends a participant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ServerMessage {
    Challenge {
        nonce: String,
    },
    #[serde(rename_all = "camelCase")]
    Joined {
        room_id: String,
        participant_id: String,
        participants: Vec<ParticipantInfo>,
    },
    #[serde(rename_all = "camelCase")]
    Published {
        stream_id: i64,
    },
    #[serde(rename_all = "camelCase")]
    Unpublished {
        stream_id: i64,
    },
    Error {
        code: i64,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<serde_json::Value>,
    },
    Event(Event),
}

/// The events of the seed (`RoomDestroyed`, `Kicked`, `InactivatedStream`) and the room's
/// own (`ParticipantJoined`, `ParticipantLeft`, `StreamPublished`, `StreamUnpublished`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    RoomDestroyed,
    Kicked,
    InactivatedStream,
    ParticipantJoined,
    ParticipantLeft,
    StreamPublished,
    StreamUnpublished,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub event: EventKind,
    pub room_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<i64>,
    /// RFC 3339, UTC, milliseconds.
    pub at: String,
}

/// `value` of a participant's join: the provision rule with the ordinary service secret.
pub fn join_value(service_id: &str, service_secret: &str, nonce: &str) -> String {
    provision_value(service_id, service_secret, nonce)
}

/// A join token's claims (CONTRACT §1 "Media"): a JWT signed HS256 with
/// [`join_token_key`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinClaims {
    /// The service.
    pub iss: String,
    pub room: String,
    /// The participant.
    pub sub: String,
    /// Expiry, unix seconds.
    pub exp: i64,
    /// May publish streams (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<bool>,
    /// May subscribe to streams (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscribe: Option<bool>,
}

/// The HS256 key of a service's join tokens, as UTF-8 text: `sha256hex(serviceId:secret)`
/// with the service secret, the hash a join value starts from (kep stores only it).
pub fn join_token_key(service_id: &str, service_secret: &str) -> String {
    sha256_hex(&format!("{service_id}:{service_secret}"))
}

/// `value` of Provision step 2: `sha256hex(sha256hex(serviceId:secret) + ":" + nonce)`.
pub fn provision_value(service_id: &str, secret: &str, nonce: &str) -> String {
    let ha = sha256_hex(&format!("{service_id}:{secret}"));
    sha256_hex(&format!("{ha}:{nonce}"))
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provision_value_matches_an_independent_computation() {
        // ha=$(printf 'svc:secret' | sha256sum | cut -d' ' -f1)
        //   = 8a545b172eecdb6eb0a1e4a64f8b985e661a4fb90796ea72f4092051dbed26d6
        // printf '%s:nonce1' "$ha" | sha256sum
        assert_eq!(
            provision_value("svc", "secret", "nonce1"),
            "3b646f840c0208355943e0037dee57093b936312e145f3d6fbf88eee8e6d6b72"
        );
    }

    #[test]
    fn events_serialize_as_the_contract_shows() {
        let msg = ServerMessage::Event(Event {
            event: EventKind::Kicked,
            room_id: "r".into(),
            participant_id: Some("p".into()),
            stream_id: None,
            at: "2026-01-01T00:00:00.000Z".into(),
        });
        assert_eq!(
            serde_json::to_value(&msg).unwrap(),
            serde_json::json!({"type":"event","event":"Kicked","roomId":"r","participantId":"p","at":"2026-01-01T00:00:00.000Z"})
        );
    }
}

/// The paths of the live routes, as the server routes them (`{name}` marks a path
/// parameter) and the client fills them.
/// `PUT /admin/v1/live/services/{id}/webhook`: where the service's room events go.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookRequest {
    /// An `http://` or `https://` URL with a host.
    #[schema(max_length = 2048, pattern = "^https?://[^/?#]+")]
    pub url: String,
    pub enabled: bool,
}

/// A service's webhook; `secret` (what signs each delivery) only where it was just set.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    pub url: String,
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Why kep turned it off (its receiver answered 410 Gone); gone when it is set again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
}

/// One event of a service's webhook and how its delivery went.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// The event's `id`, as in its body.
    pub id: String,
    /// `Room.OnRoomOpened`, `Room.OnRoomClosed`, `Room.OnParticipantEvent`,
    /// `Room.OnStreamEvent`.
    pub event: String,
    pub room_id: String,
    /// `pending` (queued or between attempts), `delivered` or `failed` (given up).
    pub status: String,
    pub attempts: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the change happened, in ms since the epoch.
    pub at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<i64>,
    /// The body posted.
    #[schema(value_type = Object)]
    pub body: serde_json::Value,
}

/// `GET …/webhook/deliveries`, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WebhookDeliveries {
    pub deliveries: Vec<WebhookDelivery>,
}

/// `GET …/webhook/deliveries?limit=`: 1 to 1000, default 100.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

pub mod paths {
    pub const SERVICES: &str = "/admin/v1/live/services";
    pub const SERVICE: &str = "/admin/v1/live/services/{id}";
    pub const SERVICE_SECRETS: &str = "/admin/v1/live/services/{id}/secrets";
    pub const ROOMS: &str = "/admin/v1/live/services/{id}/rooms";
    pub const ROOM: &str = "/admin/v1/live/services/{id}/rooms/{room}";
    pub const ROOM_KICK: &str = "/admin/v1/live/services/{id}/rooms/{room}/kick";
    pub const ROOM_INACTIVATE: &str = "/admin/v1/live/services/{id}/rooms/{room}/inactivate";
    pub const WEBHOOK: &str = "/admin/v1/live/services/{id}/webhook";
    pub const WEBHOOK_SECRET: &str = "/admin/v1/live/services/{id}/webhook/secret";
    pub const WEBHOOK_DELIVERIES: &str = "/admin/v1/live/services/{id}/webhook/deliveries";
    pub const RPC: &str = "/api/rpc";
    pub const WS: &str = "/api/ws";
    /// WHIP: publish a stream into the room.
    pub const WHIP: &str = "/api/whip/{room_id}";
    pub const WHIP_SESSION: &str = "/api/whip/{room_id}/{session}";
    /// WHEP: subscribe to a stream of the room.
    pub const WHEP: &str = "/api/whep/{room_id}/{stream_id}";
    pub const WHEP_SESSION: &str = "/api/whep/{room_id}/{stream_id}/{session}";
    /// The browser client SDK (an ES module) and its demo page.
    pub const SDK: &str = "/sdk/kep-live.js";
    pub const DEMO: &str = "/demo";
}
