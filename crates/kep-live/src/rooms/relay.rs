//! Participants of one room who joined different nodes get each other's events (CONTRACT
//! §5). Each node holds its own part of a room; an event told to this node's part goes on,
//! in the order of the room's changes, to every other node, and each that has a part of the
//! room tells it to its participants there. With one node there is nothing to relay.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use kep_core::cluster::Cluster;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::Rooms;
use crate::ids::{ParticipantId, RoomId};

/// The cluster's topic: a room event for the other nodes' parts of the room.
const TOPIC: &str = "live.room.event";

/// A room event to relay: for everyone in the room but `except`.
#[derive(Serialize, Deserialize)]
pub struct Relayed {
    pub service: Arc<str>,
    pub room: RoomId,
    /// The event as participants receive it (JSON).
    pub text: String,
    pub except: Option<ParticipantId>,
}

/// Where a room puts the events it relays; taken in order by [`relay`].
pub type Relay = mpsc::UnboundedSender<Relayed>;

/// A relay for this node's rooms, and what takes from it, where there are other nodes.
pub fn channel(cluster: &Cluster) -> Option<(Relay, mpsc::UnboundedReceiver<Relayed>)> {
    cluster.node_id().map(|_| mpsc::unbounded_channel())
}

/// Tells the other nodes' events to this node's parts of their rooms from now on; the task
/// that sends this node's events to them, one after the other.
pub fn relay(
    rooms: Weak<Rooms>,
    cluster: Cluster,
    mut events: mpsc::UnboundedReceiver<Relayed>,
) -> impl Future<Output = ()> {
    cluster.handle(
        TOPIC,
        Arc::new(move |body| {
            let told = match (rooms.upgrade(), serde_json::from_str::<Relayed>(&body)) {
                (Some(rooms), Ok(e)) => {
                    rooms.tell_here(&e);
                    Ok(String::new())
                }
                (None, _) => Err("the live service stopped".to_owned()),
                (_, Err(e)) => Err(e.to_string()),
            };
            Box::pin(std::future::ready(told))
        }),
    );
    async move {
        while let Some(e) = events.recv().await {
            let body = serde_json::to_string(&e).expect("serialises");
            if let Err(err) = cluster.tell(TOPIC, &body).await {
                tracing::warn!(error = %err, room = %e.room, "relaying a room event");
            }
        }
    }
}

impl Rooms {
    /// Another node's event of a room: to this node's participants of it, if it has any.
    fn tell_here(&self, e: &Relayed) {
        if let Some(room) = self.get(&e.service, &e.room) {
            let st = room.lock();
            if !st.closed {
                st.broadcast(&Bytes::from(e.text.clone()), e.except.as_ref());
            }
        }
    }
}
