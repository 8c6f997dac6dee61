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
    pub event: String,
    /// What it happened to: its ids from the service's top object down, `/`-separated
    /// (`demo/lobby/alice` is participant alice of room lobby of live service demo).
    pub object: String,
    /// What else there is to say about it.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub detail: Map<String, Value>,
}
