//! The Room methods (`Room.*` and the operator's room routes) on the rooms of every node
//! (CONTRACT §5). A room is where its participants joined: with several nodes, a method asks
//! the other nodes over the cluster, acts where the room and its targets are, and answers
//! once they have acted. On a node of its own every method is this node's [`Rooms`] call.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use kep_api::live::{ListParticipantsResult, ParticipantInfo, ParticipantTarget, StreamTarget};
use kep_core::cluster::{CallError, Cluster};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Rooms, missing_participant, missing_stream};
use crate::LiveError;
use crate::ids::RoomId;

/// The cluster's topic: a Room method for another node's rooms.
const TOPIC: &str = "live.room";

/// What one node asks another to do with its own rooms.
#[derive(Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
enum Ask {
    ListRooms {
        service: String,
    },
    Participants {
        service: String,
        room: RoomId,
    },
    Destroy {
        service: String,
        room: RoomId,
    },
    Kick {
        service: String,
        room: RoomId,
        targets: Vec<ParticipantTarget>,
    },
    Inactivate {
        service: String,
        room: RoomId,
        targets: Vec<StreamTarget>,
    },
}

/// Where a room's participants are: each node that has the room (`None`: this one) with
/// its participants there.
type Whereabouts = Vec<(Option<String>, Vec<ParticipantInfo>)>;

pub struct RoomMethods {
    rooms: Arc<Rooms>,
    cluster: Cluster,
}

impl RoomMethods {
    /// The methods on `rooms` and the other nodes' rooms; this node's rooms answer theirs.
    pub fn new(rooms: Arc<Rooms>, cluster: Cluster) -> Self {
        let here: Weak<Rooms> = Arc::downgrade(&rooms);
        cluster.handle(
            TOPIC,
            Arc::new(move |body| {
                let answer = match (here.upgrade(), serde_json::from_str(&body)) {
                    (Some(rooms), Ok(ask)) => answer(&rooms, ask),
                    (None, _) => Err("the live service stopped".to_owned()),
                    (_, Err(e)) => Err(e.to_string()),
                };
                Box::pin(std::future::ready(answer))
            }),
        );
        RoomMethods { rooms, cluster }
    }

    fn alone(&self) -> bool {
        self.cluster.node_id().is_none()
    }

    /// Asks every other node; the replies of those that did it.
    async fn ask_all(&self, ask: &Ask) -> Result<Vec<(String, String)>, LiveError> {
        let body = to_json(ask);
        let replies = self.cluster.gather(TOPIC, &body).await.map_err(internal)?;
        Ok(replies
            .into_iter()
            .filter_map(|(node, r)| Some((node, r.ok()?)))
            .collect())
    }

    /// `Room.ListRooms`: every node's rooms of the service.
    pub async fn list_rooms(&self, service: &Arc<str>) -> Result<Vec<RoomId>, LiveError> {
        let mut ids = self.rooms.list_rooms(service);
        if self.alone() {
            return Ok(ids);
        }
        let ask = Ask::ListRooms {
            service: service.to_string(),
        };
        for (_, reply) in self.ask_all(&ask).await? {
            ids.extend(serde_json::from_str::<Vec<RoomId>>(&reply).map_err(internal)?);
        }
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    /// The nodes that have the room, with its participants on each.
    async fn whereabouts(
        &self,
        service: &Arc<str>,
        room: &RoomId,
    ) -> Result<Whereabouts, LiveError> {
        let mut found = Vec::new();
        if let Ok(here) = self.rooms.participants(service, room) {
            found.push((None, here));
        }
        let ask = Ask::Participants {
            service: service.to_string(),
            room: room.clone(),
        };
        for (node, reply) in self.ask_all(&ask).await? {
            found.push((Some(node), serde_json::from_str(&reply).map_err(internal)?));
        }
        if found.is_empty() {
            return Err(LiveError::RoomNotFound {
                room_id: room.clone(),
            });
        }
        Ok(found)
    }

    /// A room's participants and their streams, on every node.
    pub async fn participants(
        &self,
        service: &Arc<str>,
        room: &RoomId,
    ) -> Result<Vec<ParticipantInfo>, LiveError> {
        if self.alone() {
            return self.rooms.participants(service, room);
        }
        let found = self.whereabouts(service, room).await?;
        Ok(found.into_iter().flat_map(|(_, p)| p).collect())
    }

    /// `Room.ListParticipants`, as the JSON of its result.
    pub async fn list_participants(
        &self,
        service: &Arc<str>,
        room: &RoomId,
    ) -> Result<Bytes, LiveError> {
        if self.alone() {
            return self.rooms.list_participants(service, room);
        }
        let result = ListParticipantsResult {
            participants: self.participants(service, room).await?,
        };
        Ok(Bytes::from(
            serde_json::to_vec(&result).expect("serialises"),
        ))
    }

    /// `Room.DestroyRoom`, on every node that has the room.
    pub async fn destroy(&self, service: &Arc<str>, room: &RoomId) -> Result<(), LiveError> {
        let here = self.rooms.destroy(service, room);
        if self.alone() {
            return here;
        }
        let ask = Ask::Destroy {
            service: service.to_string(),
            room: room.clone(),
        };
        let elsewhere = self.ask_all(&ask).await?;
        if here.is_err() && elsewhere.is_empty() {
            return here;
        }
        Ok(())
    }

    /// `Room.KickParticipant`: all targets or none, each on the node it joined.
    pub async fn kick(
        &self,
        service: &Arc<str>,
        room: &RoomId,
        targets: &[ParticipantTarget],
    ) -> Result<(), LiveError> {
        self.on_targets(service, room, targets).await
    }

    /// `Room.InactiveStream`: all targets or none, each on the node its publisher joined.
    pub async fn inactivate(
        &self,
        service: &Arc<str>,
        room: &RoomId,
        targets: &[StreamTarget],
    ) -> Result<(), LiveError> {
        self.on_targets(service, room, targets).await
    }

    /// Acts on every target where it is, once every target was found somewhere.
    async fn on_targets<T: RoomTarget>(
        &self,
        service: &Arc<str>,
        room: &RoomId,
        targets: &[T],
    ) -> Result<(), LiveError> {
        if self.alone() {
            return T::act(&self.rooms, service, room, targets);
        }
        let found = self.whereabouts(service, room).await?;
        let at = |t: &T| {
            found
                .iter()
                .find(|(_, ps)| ps.iter().any(|p| t.held_by(p)))
                .map(|(node, _)| node.clone())
        };
        let missing: Vec<_> = targets
            .iter()
            .filter(|t| at(t).is_none())
            .map(T::missing)
            .collect();
        if !missing.is_empty() {
            return Err(LiveError::TargetsNotFound { missing });
        }
        for (node, _) in &found {
            let mine: Vec<T> = targets
                .iter()
                .filter(|t| at(t).as_ref() == Some(node))
                .cloned()
                .collect();
            match node {
                _ if mine.is_empty() => {}
                None => T::act(&self.rooms, service, room, &mine)?,
                Some(node) => {
                    let missing = mine.iter().map(T::missing).collect();
                    let ask = T::ask(service.to_string(), room.clone(), mine);
                    self.ask(node, &ask, missing).await?;
                }
            }
        }
        Ok(())
    }

    /// Asks one node to act on `targets` of its own; its refusal (they left since they were
    /// looked for) is a Not found of them.
    async fn ask(&self, node: &str, ask: &Ask, targets: Vec<Value>) -> Result<(), LiveError> {
        let body = to_json(ask);
        match self.cluster.call(node, TOPIC, &body).await {
            Ok(_) => Ok(()),
            Err(CallError::Refused { .. }) => Err(LiveError::TargetsNotFound { missing: targets }),
            Err(e) => Err(internal(e)),
        }
    }
}

/// A Kick or Inactivate target, as the methods across nodes find it and hand it on.
trait RoomTarget: Clone {
    /// Whether it is `p` (a participant on some node), or one of `p`'s streams.
    fn held_by(&self, p: &ParticipantInfo) -> bool;
    /// How a Not found lists it.
    fn missing(&self) -> Value;
    /// This node's Room call on `targets`.
    fn act(
        rooms: &Arc<Rooms>,
        service: &Arc<str>,
        room: &RoomId,
        targets: &[Self],
    ) -> Result<(), LiveError>;
    /// What asks another node to act on `targets`.
    fn ask(service: String, room: RoomId, targets: Vec<Self>) -> Ask;
}

impl RoomTarget for ParticipantTarget {
    fn held_by(&self, p: &ParticipantInfo) -> bool {
        p.participant_id == self.participant_id
    }

    fn missing(&self) -> Value {
        missing_participant(self)
    }

    fn act(
        rooms: &Arc<Rooms>,
        service: &Arc<str>,
        room: &RoomId,
        targets: &[Self],
    ) -> Result<(), LiveError> {
        rooms.kick(service, room, targets)
    }

    fn ask(service: String, room: RoomId, targets: Vec<Self>) -> Ask {
        Ask::Kick {
            service,
            room,
            targets,
        }
    }
}

impl RoomTarget for StreamTarget {
    fn held_by(&self, p: &ParticipantInfo) -> bool {
        p.participant_id == self.participant_id
            && p.streams.iter().any(|s| s.stream_id == self.stream_id)
    }

    fn missing(&self) -> Value {
        missing_stream(self)
    }

    fn act(
        rooms: &Arc<Rooms>,
        service: &Arc<str>,
        room: &RoomId,
        targets: &[Self],
    ) -> Result<(), LiveError> {
        rooms.inactivate(service, room, targets)
    }

    fn ask(service: String, room: RoomId, targets: Vec<Self>) -> Ask {
        Ask::Inactivate {
            service,
            room,
            targets,
        }
    }
}

fn to_json(v: &impl Serialize) -> String {
    serde_json::to_string(v).expect("serialises")
}

fn internal(e: impl std::fmt::Display) -> LiveError {
    LiveError::Internal(anyhow::anyhow!("{e}"))
}

/// This node's answer to another's ask: its reply, or why not.
fn answer(rooms: &Arc<Rooms>, ask: Ask) -> Result<String, String> {
    match ask {
        Ask::ListRooms { service } => Ok(to_json(&rooms.list_rooms(&service))),
        Ask::Participants { service, room } => rooms
            .participants(&service.into(), &room)
            .map(|p| to_json(&p))
            .map_err(|e| e.to_string()),
        Ask::Destroy { service, room } => rooms
            .destroy(&service.into(), &room)
            .map(|()| String::new())
            .map_err(|e| e.to_string()),
        Ask::Kick {
            service,
            room,
            targets,
        } => rooms
            .kick(&service.into(), &room, &targets)
            .map(|()| String::new())
            .map_err(|e| e.to_string()),
        Ask::Inactivate {
            service,
            room,
            targets,
        } => rooms
            .inactivate(&service.into(), &room, &targets)
            .map(|()| String::new())
            .map_err(|e| e.to_string()),
    }
}
