//! Rooms and their participants, in memory.
//!
//! Each room is owned by its own lock; the registry is a sharded map, so no call ever waits
//! on a global lock. A change is made under the room's lock and its events are queued to
//! the participants' sockets before the lock is released, so a `Room.*` call that follows
//! sees the change, and every participant sees a room's events in one order.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use indexmap::IndexMap;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::LiveError;
use kep_api::live::{
    Event, EventKind, ParticipantInfo, ParticipantTarget, ServerMessage, StreamInfo, StreamTarget,
};

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

pub fn next_conn_id() -> ConnId {
    NEXT_CONN.fetch_add(1, Ordering::Relaxed)
}

struct Participant {
    conn: ConnId,
    outbox: Outbox,
    streams: BTreeSet<i64>,
}

#[derive(Default)]
struct RoomState {
    /// Set once the room left the registry; whoever holds a stale handle must look again.
    closed: bool,
    participants: IndexMap<String, Participant>,
    next_stream_id: i64,
    /// `Room.ListParticipants`' result, kept until the next change.
    listing: Option<Bytes>,
}

pub struct Room {
    room_id: String,
    state: Mutex<RoomState>,
}

type RoomKey = (Arc<str>, String);

/// One service's rooms by roomId.
type ServiceRooms = DashMap<String, Arc<Room>>;

pub struct Rooms {
    /// Rooms by service, so lookups by `&str` allocate nothing and a service lists only
    /// its own rooms.
    services: DashMap<Arc<str>, Arc<ServiceRooms>>,
    empty_room_grace: Duration,
    /// Where the grace timers run: tracked, and cut short when the platform stops.
    timers: TaskTracker,
    shutdown: CancellationToken,
}

/// A participant's view right after joining.
pub struct Joined {
    pub participants: Vec<ParticipantInfo>,
}

fn event(
    kind: EventKind,
    room_id: &str,
    participant_id: Option<&str>,
    stream_id: Option<i64>,
) -> Bytes {
    let at = jiff::Timestamp::now()
        .round(jiff::Unit::Millisecond)
        .unwrap_or_else(|_| jiff::Timestamp::now());
    let msg = ServerMessage::Event(Event {
        event: kind,
        room_id: room_id.to_owned(),
        participant_id: participant_id.map(str::to_owned),
        stream_id,
        at: format!("{at:.3}"),
    });
    Bytes::from(serde_json::to_vec(&msg).expect("events serialise"))
}

impl RoomState {
    fn changed(&mut self) {
        self.listing = None;
    }

    /// Queues `text` to everyone in the room but `except`.
    fn broadcast(&self, text: &Bytes, except: Option<&str>) {
        for (pid, p) in &self.participants {
            if Some(pid.as_str()) != except {
                let _ = p.outbox.send(Outbound::Text(text.clone()));
            }
        }
    }

    fn info(&self) -> Vec<ParticipantInfo> {
        self.participants
            .iter()
            .map(|(pid, p)| ParticipantInfo {
                participant_id: pid.clone(),
                streams: p
                    .streams
                    .iter()
                    .map(|&stream_id| StreamInfo { stream_id })
                    .collect(),
            })
            .collect()
    }
}

impl Room {
    fn lock(&self) -> MutexGuard<'_, RoomState> {
        self.state.lock().expect("room lock")
    }

    /// Adds (or replaces) a participant; `None` if the room closed meanwhile.
    fn join(&self, participant_id: &str, conn: ConnId, outbox: Outbox) -> Option<Joined> {
        let mut st = self.lock();
        if st.closed {
            return None;
        }
        let fresh = Participant {
            conn,
            outbox,
            streams: BTreeSet::new(),
        };
        match st.participants.get_mut(participant_id) {
            Some(existing) => {
                let old = std::mem::replace(existing, fresh);
                let _ = old.outbox.send(Outbound::Close {
                    code: close::POLICY,
                    reason: "replaced",
                });
                for sid in old.streams {
                    let ev = event(
                        EventKind::StreamUnpublished,
                        &self.room_id,
                        Some(participant_id),
                        Some(sid),
                    );
                    st.broadcast(&ev, Some(participant_id));
                }
            }
            None => {
                st.participants.insert(participant_id.to_owned(), fresh);
                let ev = event(
                    EventKind::ParticipantJoined,
                    &self.room_id,
                    Some(participant_id),
                    None,
                );
                st.broadcast(&ev, Some(participant_id));
            }
        }
        st.changed();
        Some(Joined {
            participants: st.info(),
        })
    }

    /// Removes the participant if `conn` is still its connection; true when the room is
    /// empty afterwards.
    fn leave(&self, participant_id: &str, conn: ConnId) -> bool {
        let mut st = self.lock();
        if st
            .participants
            .get(participant_id)
            .is_some_and(|p| p.conn == conn)
        {
            st.participants.shift_remove(participant_id);
            st.changed();
            let ev = event(
                EventKind::ParticipantLeft,
                &self.room_id,
                Some(participant_id),
                None,
            );
            st.broadcast(&ev, None);
        }
        st.participants.is_empty() && !st.closed
    }

    fn publish(&self, participant_id: &str, conn: ConnId) -> Option<i64> {
        let mut st = self.lock();
        let st = &mut *st;
        let p = st
            .participants
            .get_mut(participant_id)
            .filter(|p| p.conn == conn)?;
        st.next_stream_id += 1;
        let sid = st.next_stream_id;
        p.streams.insert(sid);
        st.changed();
        let ev = event(
            EventKind::StreamPublished,
            &self.room_id,
            Some(participant_id),
            Some(sid),
        );
        st.broadcast(&ev, Some(participant_id));
        Some(sid)
    }

    fn unpublish(&self, participant_id: &str, conn: ConnId, stream_id: i64) -> bool {
        let mut st = self.lock();
        let Some(p) = st
            .participants
            .get_mut(participant_id)
            .filter(|p| p.conn == conn)
        else {
            return false;
        };
        if !p.streams.remove(&stream_id) {
            return false;
        }
        st.changed();
        let ev = event(
            EventKind::StreamUnpublished,
            &self.room_id,
            Some(participant_id),
            Some(stream_id),
        );
        st.broadcast(&ev, Some(participant_id));
        true
    }
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
        }
    }

    fn service(&self, service_id: &str) -> Option<Arc<ServiceRooms>> {
        self.services.get(service_id).map(|r| r.clone())
    }

    fn get(&self, service_id: &str, room_id: &str) -> Option<Arc<Room>> {
        self.service(service_id)?.get(room_id).map(|r| r.clone())
    }

    /// Joins `participant_id` to the room, creating the room if needed.
    pub fn join(
        &self,
        service_id: &Arc<str>,
        room_id: &str,
        participant_id: &str,
        conn: ConnId,
        outbox: Outbox,
    ) -> Joined {
        let rooms = self.services.entry(service_id.clone()).or_default().clone();
        loop {
            let room = rooms
                .entry(room_id.to_owned())
                .or_insert_with(|| {
                    Arc::new(Room {
                        room_id: room_id.to_owned(),
                        state: Mutex::default(),
                    })
                })
                .clone();
            // A room that closed between the lookup and the lock is gone: look again.
            if let Some(joined) = room.join(participant_id, conn, outbox.clone()) {
                return joined;
            }
        }
    }

    /// The participant's socket ended (or it said `leave`).
    pub fn leave(
        self: &Arc<Self>,
        service_id: &Arc<str>,
        room_id: &str,
        participant_id: &str,
        conn: ConnId,
    ) {
        if let Some(room) = self.get(service_id, room_id)
            && room.leave(participant_id, conn)
        {
            self.release_if_empty(service_id.clone(), room_id.to_owned());
        }
    }

    pub fn publish(
        &self,
        service_id: &Arc<str>,
        room_id: &str,
        participant_id: &str,
        conn: ConnId,
    ) -> Option<i64> {
        self.get(service_id, room_id)?.publish(participant_id, conn)
    }

    pub fn unpublish(
        &self,
        service_id: &Arc<str>,
        room_id: &str,
        participant_id: &str,
        conn: ConnId,
        stream_id: i64,
    ) -> bool {
        self.get(service_id, room_id)
            .is_some_and(|r| r.unpublish(participant_id, conn, stream_id))
    }

    /// Drops an empty room, now or after the grace (if it is still empty then).
    fn release_if_empty(self: &Arc<Self>, service_id: Arc<str>, room_id: String) {
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
        rooms.remove_if(room_id, |_, room| {
            let mut st = room.lock();
            if st.participants.is_empty() {
                st.closed = true;
            }
            st.closed
        });
    }

    // ---- Room API ----

    /// `Room.ListRooms`
    pub fn list_rooms(&self, service_id: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .service(service_id)
            .map(|rooms| rooms.iter().map(|e| e.key().clone()).collect())
            .unwrap_or_default();
        ids.sort();
        ids
    }

    fn room(&self, service_id: &Arc<str>, room_id: &str) -> Result<Arc<Room>, LiveError> {
        self.get(service_id, room_id)
            .ok_or_else(|| LiveError::RoomNotFound {
                room_id: room_id.to_owned(),
            })
    }

    /// `Room.ListParticipants`, as the JSON of its result.
    pub fn list_participants(
        &self,
        service_id: &Arc<str>,
        room_id: &str,
    ) -> Result<Bytes, LiveError> {
        let room = self.room(service_id, room_id)?;
        let mut st = room.lock();
        if st.closed {
            return Err(LiveError::RoomNotFound {
                room_id: room_id.to_owned(),
            });
        }
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
    pub fn destroy(&self, service_id: &Arc<str>, room_id: &str) -> Result<(), LiveError> {
        let (_, room) = self
            .service(service_id)
            .and_then(|rooms| rooms.remove(room_id))
            .ok_or_else(|| LiveError::RoomNotFound {
                room_id: room_id.to_owned(),
            })?;
        let mut st = room.lock();
        st.closed = true;
        let ev = event(EventKind::RoomDestroyed, room_id, None, None);
        for (_, p) in st.participants.drain(..) {
            let _ = p.outbox.send(Outbound::Text(ev.clone()));
            let _ = p.outbox.send(Outbound::Close {
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
        room_id: &str,
        targets: &[ParticipantTarget],
    ) -> Result<(), LiveError> {
        let room = self.room(service_id, room_id)?;
        let empty = {
            let mut st = room.lock();
            let missing: Vec<_> = targets
                .iter()
                .filter(|t| !st.participants.contains_key(&t.participant_id))
                .map(|t| serde_json::json!({ "participantId": t.participant_id }))
                .collect();
            if !missing.is_empty() {
                return Err(LiveError::TargetsNotFound { missing });
            }
            for t in targets {
                let Some(p) = st.participants.shift_remove(&t.participant_id) else {
                    continue;
                };
                let ev = event(EventKind::Kicked, room_id, Some(&t.participant_id), None);
                let _ = p.outbox.send(Outbound::Text(ev));
                let _ = p.outbox.send(Outbound::Close {
                    code: close::POLICY,
                    reason: "kicked",
                });
                let left = event(
                    EventKind::ParticipantLeft,
                    room_id,
                    Some(&t.participant_id),
                    None,
                );
                st.broadcast(&left, None);
            }
            st.changed();
            st.participants.is_empty()
        };
        if empty {
            self.release_if_empty(service_id.clone(), room_id.to_owned());
        }
        Ok(())
    }

    /// `Room.InactiveStream`: all targets or none.
    pub fn inactivate(
        &self,
        service_id: &Arc<str>,
        room_id: &str,
        targets: &[StreamTarget],
    ) -> Result<(), LiveError> {
        let room = self.room(service_id, room_id)?;
        let mut st = room.lock();
        let missing: Vec<_> = targets
            .iter()
            .filter(|t| {
                !st.participants
                    .get(&t.participant_id)
                    .is_some_and(|p| p.streams.contains(&t.stream_id))
            })
            .map(|t| serde_json::json!({ "participantId": t.participant_id, "streamId": t.stream_id }))
            .collect();
        if !missing.is_empty() {
            return Err(LiveError::TargetsNotFound { missing });
        }
        for t in targets {
            let Some(p) = st.participants.get_mut(&t.participant_id) else {
                continue;
            };
            if !p.streams.remove(&t.stream_id) {
                continue;
            }
            let owner = event(
                EventKind::InactivatedStream,
                room_id,
                Some(&t.participant_id),
                Some(t.stream_id),
            );
            let _ = p.outbox.send(Outbound::Text(owner));
            let others = event(
                EventKind::StreamUnpublished,
                room_id,
                Some(&t.participant_id),
                Some(t.stream_id),
            );
            st.broadcast(&others, Some(&t.participant_id));
        }
        st.changed();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn participant(
        rooms: &Rooms,
        svc: &Arc<str>,
        room: &str,
        pid: &str,
    ) -> (ConnId, mpsc::UnboundedReceiver<Outbound>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let conn = next_conn_id();
        rooms.join(svc, room, pid, conn, tx);
        (conn, rx)
    }

    fn texts(rx: &mut mpsc::UnboundedReceiver<Outbound>) -> Vec<serde_json::Value> {
        let mut out = vec![];
        while let Ok(m) = rx.try_recv() {
            match m {
                Outbound::Text(t) => out.push(serde_json::from_slice(&t).unwrap()),
                Outbound::Close { reason, .. } => out.push(serde_json::json!({ "close": reason })),
            }
        }
        out
    }

    #[tokio::test]
    async fn kick_is_all_or_nothing() {
        let rooms = Arc::new(Rooms::new(
            Duration::ZERO,
            TaskTracker::new(),
            CancellationToken::new(),
        ));
        let svc: Arc<str> = "svc".into();
        let (_, mut a) = participant(&rooms, &svc, "r", "a");
        let (_, mut b) = participant(&rooms, &svc, "r", "b");
        texts(&mut a);
        let targets = [
            ParticipantTarget {
                participant_id: "a".into(),
            },
            ParticipantTarget {
                participant_id: "zz".into(),
            },
        ];
        let err = rooms.kick(&svc, "r", &targets).unwrap_err();
        assert!(matches!(err, LiveError::TargetsNotFound { ref missing } if missing.len() == 1));
        assert!(texts(&mut a).is_empty(), "nothing happened");
        let listing = rooms.list_participants(&svc, "r").unwrap();
        assert_eq!(
            String::from_utf8_lossy(&listing)
                .matches("participantId")
                .count(),
            2
        );

        rooms.kick(&svc, "r", &targets[..1]).unwrap();
        let got = texts(&mut a);
        assert_eq!(got[0]["event"], "Kicked");
        assert_eq!(got[1]["close"], "kicked");
        let got = texts(&mut b);
        assert_eq!(got.last().unwrap()["event"], "ParticipantLeft");
    }

    #[tokio::test]
    async fn the_last_leave_ends_the_room_and_a_stale_socket_never_removes_its_replacement() {
        let rooms = Arc::new(Rooms::new(
            Duration::ZERO,
            TaskTracker::new(),
            CancellationToken::new(),
        ));
        let svc: Arc<str> = "svc".into();
        let (old, mut old_rx) = participant(&rooms, &svc, "r", "a");
        let (new, _new_rx) = participant(&rooms, &svc, "r", "a");
        assert!(matches!(texts(&mut old_rx).last(), Some(v) if v["close"] == "replaced"));
        rooms.leave(&svc, "r", "a", old);
        assert_eq!(rooms.list_rooms("svc"), vec!["r".to_owned()]);
        rooms.leave(&svc, "r", "a", new);
        assert!(rooms.list_rooms("svc").is_empty());
    }

    #[tokio::test]
    async fn the_listing_is_rebuilt_after_a_change() {
        let rooms = Arc::new(Rooms::new(
            Duration::ZERO,
            TaskTracker::new(),
            CancellationToken::new(),
        ));
        let svc: Arc<str> = "svc".into();
        let (conn, _rx) = participant(&rooms, &svc, "r", "a");
        let before = rooms.list_participants(&svc, "r").unwrap();
        let sid = rooms.publish(&svc, "r", "a", conn).unwrap();
        let after = rooms.list_participants(&svc, "r").unwrap();
        assert_ne!(before, after);
        assert!(String::from_utf8_lossy(&after).contains(&format!("\"streamId\":{sid}")));
    }
}
