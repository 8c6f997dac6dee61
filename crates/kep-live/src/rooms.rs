//! Rooms and their participants, in memory.
//!
//! Each room is owned by its own lock; the registry is a sharded map, so no call ever waits
//! on a global lock. A change is made under the room's lock and its events are queued to
//! the participants' sockets before the lock is released, so a `Room.*` call that follows
//! sees the change, and every participant sees a room's events in one order.

use std::collections::{BTreeMap, BTreeSet};
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
use crate::media::Media;
use kep_api::live::{
    Event, EventKind, ParticipantInfo, ParticipantTarget, ServerMessage, StreamInfo, StreamTarget,
    TrackInfo,
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
    /// Its socket's connection; 0 while it is in the room by its media alone.
    conn: ConnId,
    /// Its socket, if it has one: a WHIP publisher is in the room without one.
    outbox: Option<Outbox>,
    streams: BTreeSet<i64>,
    /// Which of `streams` are WHIP streams (media sessions), not the socket's, with their
    /// tracks.
    media: BTreeMap<i64, Vec<TrackInfo>>,
    /// Its WHEP sessions: a subscriber is in the room while it watches.
    watching: usize,
}

impl Participant {
    /// Drops the streams its socket published (they end with it); their ids.
    fn drop_socket_streams(&mut self) -> BTreeSet<i64> {
        let media = &self.media;
        let (kept, dropped) = std::mem::take(&mut self.streams)
            .into_iter()
            .partition(|sid| media.contains_key(sid));
        self.streams = kept;
        dropped
    }

    fn send(&self, message: Outbound) {
        if let Some(outbox) = &self.outbox {
            let _ = outbox.send(message);
        }
    }
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
    /// The rooms' media: what a Room method or a leaving participant ends there too.
    media: Option<Arc<Media>>,
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

    /// A new stream of the participant: the others are told. Its id.
    fn add_stream(&mut self, room_id: &str, participant_id: &str) -> i64 {
        self.next_stream_id += 1;
        let sid = self.next_stream_id;
        if let Some(p) = self.participants.get_mut(participant_id) {
            p.streams.insert(sid);
        }
        self.changed();
        self.announce(
            EventKind::StreamPublished,
            room_id,
            participant_id,
            Some(sid),
            Some(participant_id),
        );
        sid
    }

    /// A participant comes in (with its socket, or by its media alone: `conn` 0, no
    /// outbox): the others are told.
    fn enter(&mut self, room_id: &str, participant_id: &str, conn: ConnId, outbox: Option<Outbox>) {
        let fresh = Participant {
            conn,
            outbox,
            streams: BTreeSet::new(),
            media: BTreeMap::new(),
            watching: 0,
        };
        self.participants.insert(participant_id.to_owned(), fresh);
        self.changed();
        let pid = Some(participant_id);
        self.announce(
            EventKind::ParticipantJoined,
            room_id,
            participant_id,
            None,
            pid,
        );
    }

    /// The participant leaves: the others are told.
    fn remove(&mut self, room_id: &str, participant_id: &str) {
        self.participants.shift_remove(participant_id);
        self.announce(
            EventKind::ParticipantLeft,
            room_id,
            participant_id,
            None,
            None,
        );
    }

    /// Tells everyone but `except` what happened to the participant (and its stream).
    fn announce(
        &self,
        kind: EventKind,
        room_id: &str,
        participant_id: &str,
        stream_id: Option<i64>,
        except: Option<&str>,
    ) {
        let ev = event(kind, room_id, Some(participant_id), stream_id);
        self.broadcast(&ev, except);
    }

    /// Queues `text` to everyone in the room but `except`.
    fn broadcast(&self, text: &Bytes, except: Option<&str>) {
        for (pid, p) in &self.participants {
            if Some(pid.as_str()) != except {
                p.send(Outbound::Text(text.clone()));
            }
        }
    }

    /// Tells the others that these streams of `participant_id` ended.
    fn unpublished(&self, room_id: &str, participant_id: &str, streams: &BTreeSet<i64>) {
        for &sid in streams {
            self.announce(
                EventKind::StreamUnpublished,
                room_id,
                participant_id,
                Some(sid),
                Some(participant_id),
            );
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
                    .map(|&stream_id| StreamInfo {
                        stream_id,
                        tracks: p.media.get(&stream_id).cloned().unwrap_or_default(),
                    })
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
        match st.participants.get_mut(participant_id) {
            // In by its media alone: the socket is its own from now on.
            Some(existing) if existing.outbox.is_none() => {
                existing.conn = conn;
                existing.outbox = Some(outbox);
            }
            Some(existing) => {
                existing.send(Outbound::Close {
                    code: close::POLICY,
                    reason: "replaced",
                });
                existing.conn = conn;
                existing.outbox = Some(outbox);
                // The old socket's streams end with it; its media streams do not.
                let socket = existing.drop_socket_streams();
                st.unpublished(&self.room_id, participant_id, &socket);
            }
            None => st.enter(&self.room_id, participant_id, conn, Some(outbox)),
        }
        st.changed();
        Some(Joined {
            participants: st.info(),
        })
    }

    /// The participant's socket `conn` ended: it leaves, unless its media keep it in the
    /// room (then only the socket's streams end). True when the room is empty afterwards.
    fn leave(&self, participant_id: &str, conn: ConnId) -> bool {
        let mut st = self.lock();
        let Some(p) = st
            .participants
            .get_mut(participant_id)
            .filter(|p| p.conn == conn && p.outbox.is_some())
        else {
            return st.participants.is_empty() && !st.closed;
        };
        if p.media.is_empty() && p.watching == 0 {
            st.remove(&self.room_id, participant_id);
        } else {
            let socket = p.drop_socket_streams();
            (p.conn, p.outbox) = (0, None);
            st.unpublished(&self.room_id, participant_id, &socket);
        }
        st.changed();
        st.participants.is_empty() && !st.closed
    }

    fn publish(&self, participant_id: &str, conn: ConnId) -> Option<i64> {
        let mut st = self.lock();
        st.participants
            .get(participant_id)
            .filter(|p| p.conn == conn && p.outbox.is_some())?;
        Some(st.add_stream(&self.room_id, participant_id))
    }

    fn unpublish(&self, participant_id: &str, conn: ConnId, stream_id: i64) -> bool {
        let mut st = self.lock();
        // A socket unpublishes its own streams; a WHIP stream ends with its session.
        let Some(p) = st
            .participants
            .get_mut(participant_id)
            .filter(|p| p.conn == conn && p.outbox.is_some() && !p.media.contains_key(&stream_id))
        else {
            return false;
        };
        if !p.streams.remove(&stream_id) {
            return false;
        }
        st.changed();
        st.announce(
            EventKind::StreamUnpublished,
            &self.room_id,
            participant_id,
            Some(stream_id),
            Some(participant_id),
        );
        true
    }

    /// A media session of the participant starts: it is in the room from then on, socket or
    /// not. A publisher's (`published`, its tracks) gets a new stream (its id); `None` if
    /// the room closed meanwhile.
    fn media_started(
        &self,
        participant_id: &str,
        published: Option<Vec<TrackInfo>>,
    ) -> Option<Option<i64>> {
        let mut st = self.lock();
        if st.closed {
            return None;
        }
        let st = &mut *st;
        if !st.participants.contains_key(participant_id) {
            st.enter(&self.room_id, participant_id, 0, None);
        }
        let p = st
            .participants
            .get_mut(participant_id)
            .expect("just made sure");
        let Some(tracks) = published else {
            p.watching += 1;
            return Some(None);
        };
        let sid = st.add_stream(&self.room_id, participant_id);
        if let Some(p) = st.participants.get_mut(participant_id) {
            p.media.insert(sid, tracks);
        }
        Some(Some(sid))
    }

    /// A media session ended: a publisher's stream with it. A participant in the room by
    /// its media alone leaves with its last session. True when the room is empty afterwards.
    fn media_ended(&self, participant_id: &str, stream_id: Option<i64>) -> bool {
        let mut st = self.lock();
        let Some(p) = st.participants.get_mut(participant_id) else {
            return st.participants.is_empty() && !st.closed;
        };
        let ended = match stream_id {
            Some(sid) => p.media.remove(&sid).is_some() && p.streams.remove(&sid),
            None => {
                p.watching = p.watching.saturating_sub(1);
                false
            }
        };
        let alone = p.outbox.is_none() && p.streams.is_empty() && p.watching == 0;
        if let Some(sid) = stream_id.filter(|_| ended) {
            st.unpublished(&self.room_id, participant_id, &BTreeSet::from([sid]));
        }
        if alone {
            st.remove(&self.room_id, participant_id);
        }
        st.changed();
        st.participants.is_empty() && !st.closed
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
            media: None,
        }
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
        room_id: &str,
        participant_id: &str,
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
        room_id: &str,
        participant_id: &str,
        stream_id: Option<i64>,
    ) {
        if let Some(room) = self.get(service_id, room_id)
            && room.media_ended(participant_id, stream_id)
        {
            self.release_if_empty(service_id.clone(), room_id.to_owned());
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
        room_id: &str,
        change: impl Fn(&Room) -> Option<T>,
    ) -> T {
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
            if let Some(done) = change(&room) {
                return done;
            }
        }
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
        self.in_room(service_id, room_id, |room| {
            room.join(participant_id, conn, outbox.clone())
        })
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
        let removed = rooms.remove_if(room_id, |_, room| {
            let mut st = room.lock();
            if st.participants.is_empty() {
                st.closed = true;
            }
            st.closed
        });
        if let (Some(_), Some(media)) = (removed, self.media()) {
            media.end_room(&(service_id.clone(), room_id.clone()));
        }
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
        if let Some(media) = self.media() {
            media.end_room(&(service_id.clone(), room_id.to_owned()));
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
                if let Some(media) = self.media() {
                    media.end_participant(
                        &(service_id.clone(), room_id.to_owned()),
                        &t.participant_id,
                    );
                }
                let ev = event(EventKind::Kicked, room_id, Some(&t.participant_id), None);
                p.send(Outbound::Text(ev));
                p.send(Outbound::Close {
                    code: close::POLICY,
                    reason: "kicked",
                });
                st.announce(
                    EventKind::ParticipantLeft,
                    room_id,
                    &t.participant_id,
                    None,
                    None,
                );
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
            if p.media.remove(&t.stream_id).is_some()
                && let Some(media) = self.media()
            {
                media.end_stream(&(service_id.clone(), room_id.to_owned()), t.stream_id);
            }
            let owner = event(
                EventKind::InactivatedStream,
                room_id,
                Some(&t.participant_id),
                Some(t.stream_id),
            );
            p.send(Outbound::Text(owner));
            let (pid, sid) = (t.participant_id.as_str(), Some(t.stream_id));
            st.announce(EventKind::StreamUnpublished, room_id, pid, sid, Some(pid));
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
