//! Rooms and their participants, in memory.
//!
//! Each room is owned by its own lock; the registry is a sharded map, so no call ever waits
//! on a global lock. A change is made under the room's lock and its events are queued to
//! the participants' sockets before the lock is released, so a `Room.*` call that follows
//! sees the change, and every participant sees a room's events in one order.

mod methods;
mod relay;
mod room;
#[cfg(test)]
mod tests;

pub use methods::RoomMethods;
pub use relay::{channel as relay_channel, relay};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::LiveError;
use crate::media::Media;
use kep_api::live::{EventKind, ParticipantInfo, ParticipantTarget, StreamTarget, TrackInfo};
use kep_core::activity::ServiceActivity;

use crate::ids::{ParticipantId, RoomId};
use crate::webhooks::Webhooks;
use room::{Room, RoomActivity, RoomState, event};
use serde_json::{Value, json};

/// What a participant's socket task is told to do.
#[derive(Debug, Clone)]
pub enum Outbound {
    /// A text frame (JSON, so UTF-8), serialised once and shared by all its receivers.
    Text(Bytes),
    /// A close frame; the socket task ends after it.
    Close { code: u16, reason: &'static str },
}

pub type Outbox = mpsc::UnboundedSender<Outbound>;

/// Close codes and reasons the server uses.
pub mod close {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const POLICY: u16 = 1008;
}

/// A connection's identity, so that a stale socket never removes its replacement.
pub type ConnId = u64;

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// A room's state, unless the room closed since it was looked up.
fn open<'a>(
    st: std::sync::MutexGuard<'a, RoomState>,
    room_id: &RoomId,
) -> Result<std::sync::MutexGuard<'a, RoomState>, LiveError> {
    if st.closed {
        return Err(LiveError::RoomNotFound {
            room_id: room_id.clone(),
        });
    }
    Ok(st)
}

/// A Kick target no participant answers to, as the error lists it.
pub fn missing_participant(t: &ParticipantTarget) -> Value {
    json!({ "participantId": t.participant_id })
}

/// An Inactivate target no stream answers to, as the error lists it.
pub fn missing_stream(t: &StreamTarget) -> Value {
    json!({ "participantId": t.participant_id, "streamId": t.stream_id })
}

pub fn next_conn_id() -> ConnId {
    NEXT_CONN.fetch_add(1, Ordering::Relaxed)
}

use crate::media::RoomKey;

/// One service's rooms by roomId.
type ServiceRooms = DashMap<RoomId, Arc<Room>>;

pub struct Rooms {
    /// Rooms by service, so lookups by `&str` allocate nothing and a service lists only
    /// its own rooms.
    services: DashMap<Arc<str>, Arc<ServiceRooms>>,
    empty_room_grace: Duration,
    /// Where the grace timers run: tracked, and cut short when the platform stops.
    timers: TaskTracker,
    shutdown: CancellationToken,
    /// The rooms' media: what a Room method or a leaving participant ends there too.
    media: Option<Arc<Media>>,
    /// Where rooms record what happens in them.
    activity: Option<ServiceActivity>,
    /// Where what happens in them goes to their services' webhooks.
    webhooks: Option<Arc<Webhooks>>,
    /// Where their events go to the other nodes' parts of the same rooms.
    relay: Option<relay::Relay>,
    /// Stream ids are `(n - 1) * step + offset + 1` (n = 1, 2, …): 1, 2, 3 … on one node;
    /// with several nodes the step is the number of slots and the offset the node's, so two
    /// parts of a room never give the same id.
    stream_ids: room::StreamIds,
}

/// A participant's view right after joining.
pub struct Joined {
    pub participants: Vec<ParticipantInfo>,
}

impl Rooms {
    pub fn new(
        empty_room_grace: Duration,
        timers: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        Rooms {
            services: DashMap::new(),
            empty_room_grace,
            timers,
            shutdown,
            media: None,
            activity: None,
            webhooks: None,
            relay: None,
            stream_ids: room::StreamIds::default(),
        }
    }

    /// Rooms whose events go to the other nodes' parts of the same rooms too (`relay`), on
    /// the node of `slot`.
    pub fn with_relay(mut self, relay: relay::Relay, slot: u16) -> Self {
        self.relay = Some(relay);
        self.stream_ids = room::StreamIds {
            step: i64::from(kep_core::cluster::SLOTS),
            offset: i64::from(slot),
        };
        self
    }

    /// Rooms whose changes are events of their services' webhooks.
    pub fn with_webhooks(mut self, webhooks: Arc<Webhooks>) -> Self {
        self.webhooks = Some(webhooks);
        self
    }

    /// Rooms that record what happens in them in `activity`.
    pub fn with_activity(mut self, activity: ServiceActivity) -> Self {
        self.activity = Some(activity);
        self
    }

    /// Rooms whose Room methods also act on `media`'s sessions.
    pub fn with_media(mut self, media: Arc<Media>) -> Self {
        self.media = Some(media);
        self
    }

    fn media(&self) -> Option<&Media> {
        self.media.as_deref()
    }

    /// A media session of the participant, who is in the room (made if needed) from now
    /// on: a publisher's gets a new stream, whose id it returns.
    pub fn media_started(
        &self,
        service_id: &Arc<str>,
        room_id: &RoomId,
        participant_id: &ParticipantId,
        published: Option<Vec<TrackInfo>>,
    ) -> Option<i64> {
        self.in_room(service_id, room_id, |room| {
            room.media_started(participant_id, published.clone())
        })
    }

    /// A media session ended (a publisher's stream with it).
    pub fn media_ended(
        self: &Arc<Self>,
        service_id: &Arc<str>,
        room_id: &RoomId,
        participant_id: &ParticipantId,
        stream_id: Option<i64>,
    ) {
        if let Some(room) = self.get(service_id, room_id)
            && room.media_ended(participant_id, stream_id)
        {
            self.release_if_empty(service_id.clone(), room_id.clone());
        }
    }

    fn service(&self, service_id: &str) -> Option<Arc<ServiceRooms>> {
        self.services.get(service_id).map(|r| r.clone())
    }

    /// `change` made in the room, which is made if there is none; a room that closed
    /// between the lookup and its lock (`change` gave `None`) is gone: it looks again.
    fn in_room<T>(
        &self,
        service_id: &Arc<str>,
        room_id: &RoomId,
        change: impl Fn(&Room) -> Option<T>,
    ) -> T {
        let rooms = self.services.entry(service_id.clone()).or_default().clone();
        loop {
            let room = rooms
                .entry(room_id.clone())
                .or_insert_with(|| {
                    let activity = RoomActivity {
                        activity: self.activity.clone(),
                        webhooks: self.webhooks.clone(),
                        relay: self.relay.clone(),
                        service_id: service_id.clone(),
                        room_id: room_id.clone(),
                    };
                    let state = RoomState {
                        activity: Some(activity),
                        stream_ids: self.stream_ids,
                        ..RoomState::default()
                    };
                    state.record("room.opened", None, Value::Null);
                    Arc::new(Room {
                        room_id: room_id.clone(),
                        state: Mutex::new(state),
                    })
                })
                .clone();
            if let Some(done) = change(&room) {
                return done;
            }
        }
    }

    fn get(&self, service_id: &str, room_id: &RoomId) -> Option<Arc<Room>> {
        self.service(service_id)?.get(room_id).map(|r| r.clone())
    }

    /// Joins `participant_id` to the room, creating the room if needed.
    pub fn join(
        &self,
        service_id: &Arc<str>,
        room_id: &RoomId,
        participant_id: &ParticipantId,
        conn: ConnId,
        outbox: Outbox,
    ) -> Joined {
        self.in_room(service_id, room_id, |room| {
            room.join(participant_id, conn, outbox.clone())
        })
    }

    /// The participant's socket ended (or it said `leave`).
    pub fn leave(
        self: &Arc<Self>,
        service_id: &Arc<str>,
        room_id: &RoomId,
        participant_id: &ParticipantId,
        conn: ConnId,
    ) {
        if let Some(room) = self.get(service_id, room_id)
            && room.leave(participant_id, conn)
        {
            self.release_if_empty(service_id.clone(), room_id.clone());
        }
    }

    pub fn publish(
        &self,
        service_id: &Arc<str>,
        room_id: &RoomId,
        participant_id: &ParticipantId,
        conn: ConnId,
    ) -> Option<i64> {
        self.get(service_id, room_id)?.publish(participant_id, conn)
    }

    pub fn unpublish(
        &self,
        service_id: &Arc<str>,
        room_id: &RoomId,
        participant_id: &ParticipantId,
        conn: ConnId,
        stream_id: i64,
    ) -> bool {
        self.get(service_id, room_id)
            .is_some_and(|r| r.unpublish(participant_id, conn, stream_id))
    }

    /// Drops an empty room, now or after the grace (if it is still empty then).
    fn release_if_empty(self: &Arc<Self>, service_id: Arc<str>, room_id: RoomId) {
        let key = (service_id, room_id);
        if self.empty_room_grace.is_zero() {
            self.remove_if_empty(&key);
            return;
        }
        let rooms = Arc::clone(self);
        let shutdown = self.shutdown.clone();
        self.timers.spawn(async move {
            let grace = tokio::time::sleep(rooms.empty_room_grace);
            if shutdown.run_until_cancelled(grace).await.is_some() {
                rooms.remove_if_empty(&key);
            }
        });
    }

    fn remove_if_empty(&self, (service_id, room_id): &RoomKey) {
        let Some(rooms) = self.service(service_id) else {
            return;
        };
        let removed = rooms.remove_if(room_id, |_, room| {
            let mut st = room.lock();
            if st.participants.is_empty() && !st.closed {
                st.closed = true;
                st.record("room.closed", None, json!({ "reason": "empty" }));
            }
            st.closed
        });
        if let (Some(_), Some(media)) = (removed, self.media()) {
            media.end_room(&(service_id.clone(), room_id.clone()));
        }
    }

    // ---- Room API ----

    /// How many rooms, participants and streams there are, across every service.
    pub fn counts(&self) -> (usize, usize, usize) {
        let (mut rooms, mut participants, mut streams) = (0, 0, 0);
        for service in &self.services {
            for room in service.iter() {
                let st = room.lock();
                rooms += 1;
                participants += st.participants.len();
                streams += st
                    .participants
                    .values()
                    .map(|p| p.streams.len())
                    .sum::<usize>();
            }
        }
        (rooms, participants, streams)
    }

    /// `Room.ListRooms`
    pub fn list_rooms(&self, service_id: &str) -> Vec<RoomId> {
        let mut ids: Vec<RoomId> = self
            .service(service_id)
            .map(|rooms| rooms.iter().map(|e| e.key().clone()).collect())
            .unwrap_or_default();
        ids.sort();
        ids
    }

    fn room(&self, service_id: &Arc<str>, room_id: &RoomId) -> Result<Arc<Room>, LiveError> {
        self.get(service_id, room_id)
            .ok_or_else(|| LiveError::RoomNotFound {
                room_id: room_id.clone(),
            })
    }

    /// A room's participants and their streams (the operator's listing).
    pub fn participants(
        &self,
        service_id: &Arc<str>,
        room_id: &RoomId,
    ) -> Result<Vec<ParticipantInfo>, LiveError> {
        let room = self.room(service_id, room_id)?;
        let st = open(room.lock(), room_id)?;
        Ok(st.info())
    }

    /// `Room.ListParticipants`, as the JSON of its result.
    pub fn list_participants(
        &self,
        service_id: &Arc<str>,
        room_id: &RoomId,
    ) -> Result<Bytes, LiveError> {
        let room = self.room(service_id, room_id)?;
        let mut st = open(room.lock(), room_id)?;
        if let Some(listing) = &st.listing {
            return Ok(listing.clone());
        }
        let result = kep_api::live::ListParticipantsResult {
            participants: st.info(),
        };
        let listing = Bytes::from(serde_json::to_vec(&result).expect("listing serialises"));
        st.listing = Some(listing.clone());
        Ok(listing)
    }

    /// `Room.DestroyRoom`: everyone gets `RoomDestroyed`, then their sockets close.
    pub fn destroy(&self, service_id: &Arc<str>, room_id: &RoomId) -> Result<(), LiveError> {
        let (_, room) = self
            .service(service_id)
            .and_then(|rooms| rooms.remove(room_id))
            .ok_or_else(|| LiveError::RoomNotFound {
                room_id: room_id.clone(),
            })?;
        let mut st = room.lock();
        st.closed = true;
        // Everyone leaves before the room closes, for whoever counts who is in.
        for pid in st.participants.keys() {
            st.record(
                "participant.left",
                Some(pid),
                json!({ "reason": "destroyed" }),
            );
        }
        st.record("room.closed", None, json!({ "reason": "destroyed" }));
        if let Some(media) = self.media() {
            media.end_room(&(service_id.clone(), room_id.clone()));
        }
        let ev = event(EventKind::RoomDestroyed, room_id, None, None);
        for (_, p) in st.participants.drain(..) {
            p.send(Outbound::Text(ev.clone()));
            p.send(Outbound::Close {
                code: close::NORMAL,
                reason: "room destroyed",
            });
        }
        Ok(())
    }

    /// `Room.KickParticipant`: all targets or none.
    pub fn kick(
        self: &Arc<Self>,
        service_id: &Arc<str>,
        room_id: &RoomId,
        targets: &[ParticipantTarget],
    ) -> Result<(), LiveError> {
        let room = self.room(service_id, room_id)?;
        let empty = {
            let mut st = room.lock();
            let missing: Vec<_> = targets
                .iter()
                .filter(|t| !st.participants.contains_key(t.participant_id.as_str()))
                .map(missing_participant)
                .collect();
            if !missing.is_empty() {
                return Err(LiveError::TargetsNotFound { missing });
            }
            for t in targets {
                let Some((pid, p)) = st
                    .participants
                    .shift_remove_entry(t.participant_id.as_str())
                else {
                    continue;
                };
                if let Some(media) = self.media() {
                    media.end_participant(&(service_id.clone(), room_id.clone()), &pid);
                }
                let ev = event(EventKind::Kicked, room_id, Some(&pid), None);
                p.send(Outbound::Text(ev));
                p.send(Outbound::Close {
                    code: close::POLICY,
                    reason: "kicked",
                });
                st.announce_as(
                    EventKind::ParticipantLeft,
                    EventKind::Kicked,
                    room_id,
                    &pid,
                    None,
                    None,
                );
            }
            st.changed();
            st.participants.is_empty()
        };
        if empty {
            self.release_if_empty(service_id.clone(), room_id.clone());
        }
        Ok(())
    }

    /// `Room.InactiveStream`: all targets or none.
    pub fn inactivate(
        &self,
        service_id: &Arc<str>,
        room_id: &RoomId,
        targets: &[StreamTarget],
    ) -> Result<(), LiveError> {
        let room = self.room(service_id, room_id)?;
        let mut st = room.lock();
        let missing: Vec<_> = targets
            .iter()
            .filter(|t| {
                !st.participants
                    .get(t.participant_id.as_str())
                    .is_some_and(|p| p.streams.contains(&t.stream_id))
            })
            .map(missing_stream)
            .collect();
        if !missing.is_empty() {
            return Err(LiveError::TargetsNotFound { missing });
        }
        for t in targets {
            let pid = ParticipantId::from(t.participant_id.as_str());
            let Some(p) = st.participants.get_mut(&pid) else {
                continue;
            };
            if !p.streams.remove(&t.stream_id) {
                continue;
            }
            if p.media.remove(&t.stream_id).is_some()
                && let Some(media) = self.media()
            {
                media.end_stream(&(service_id.clone(), room_id.clone()), t.stream_id);
            }
            let owner = event(
                EventKind::InactivatedStream,
                room_id,
                Some(&pid),
                Some(t.stream_id),
            );
            p.send(Outbound::Text(owner));
            let sid = Some(t.stream_id);
            let (gone, why) = (EventKind::StreamUnpublished, EventKind::InactivatedStream);
            st.announce_as(gone, why, room_id, &pid, sid, Some(&pid));
        }
        st.changed();
        Ok(())
    }
}
