//! The platform's activity (`GET /admin/v1/events`): every state change of every service,
//! as Server-Sent Events whose data is an [`ActivityEvent`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// The path of the activity stream on the admin listener.
pub const EVENTS: &str = "/admin/v1/events";

/// One state change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ActivityEvent {
    /// Increasing from 1 with each event of this run; the SSE `id` (`Last-Event-ID`
    /// resumes after it).
    pub id: u64,
    /// When, in milliseconds since the epoch.
    pub at: i64,
    /// The service it happened in: `live`, `adapter`, `messaging`, `serving`.
    pub service: String,
    /// What happened, `<object kind>.<change>`: `room.opened`, `message.accepted`.
    pub kind: String,
    /// The same as `kind` (the name the console and earlier clients read).
    pub event: String,
    /// What it happened to: its ids from the service's top object down, `/`-separated
    /// (`demo/lobby/alice` is participant alice of room lobby of live service demo).
    pub object: String,
    /// The same ids, each under its own name.
    #[serde(flatten)]
    pub ids: ObjectIds,
    /// What else there is to say about it.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub detail: Map<String, Value>,
}

/// The ids of the object an event is about and of those above it, each as a string, by
/// the names the service's API gives them; those of other services are left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ObjectIds {
    /// Live: the service.
    #[serde(rename = "serviceId", default, skip_serializing_if = "Option::is_none")]
    pub service_id: Option<String>,
    /// Live: the room.
    #[serde(rename = "roomId", default, skip_serializing_if = "Option::is_none")]
    pub room_id: Option<String>,
    /// Live: the participant (also of a stream's events).
    #[serde(
        rename = "participantId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub participant_id: Option<String>,
    /// Adapter: the org login type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org_login_type_id: Option<String>,
    /// Adapter: the DRM session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Messaging: the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Messaging: the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Serving: the endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Serving: the deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// Serving: the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}
