//! A room's state under its lock: its participants, their streams and sockets, and how a
//! change is told to the others.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use indexmap::IndexMap;
use kep_core::activity::ServiceActivity;

use crate::ids::{ParticipantId, RoomId};
use crate::webhooks::Webhooks;
use serde_json::{Value, json};

use super::{ConnId, Joined, Outbound, Outbox, close};
use kep_api::live::{Event, EventKind, ParticipantInfo, ServerMessage, StreamInfo, TrackInfo};

pub(super) struct Participant {
    /// Its socket's connection; 0 while it is in the room by its media alone.
    pub(super) conn: ConnId,
    /// Its socket, if it has one: a WHIP publisher is in the room without one.
    pub(super) outbox: Option<Outbox>,
    pub(super) streams: BTreeSet<i64>,
    /// Which of `streams` are WHIP streams (media sessions), not the socket's, with their
    /// tracks.
    pub(super) media: BTreeMap<i64, Vec<TrackInfo>>,
    /// Its WHEP sessions: a subscriber is in the room while it watches.
    pub(super) watching: usize,
}

impl Participant {
    /// Drops the streams its socket published (they end with it); their ids.
    pub(super) fn drop_socket_streams(&mut self) -> BTreeSet<i64> {
        let media = &self.media;
        let (kept, dropped) = std::mem::take(&mut self.streams)
            .into_iter()
            .partition(|sid| media.contains_key(sid));
        self.streams = kept;
        dropped
    }

    pub(super) fn send(&self, message: Outbound) {
        if let Some(outbox) = &self.outbox {
            let _ = outbox.send(message);
        }
    }
}

#[derive(Default)]
pub(super) struct RoomState {
    /// Set once the room left the registry; whoever holds a stale handle must look again.
    pub(super) closed: bool,
    pub(super) participants: IndexMap<ParticipantId, Participant>,
    pub(super) next_stream_id: i64,
    pub(super) stream_ids: StreamIds,
    /// `Room.ListParticipants`' result, kept until the next change.
    pub(super) listing: Option<Bytes>,
    /// Where what happens in the room is recorded.
    pub(super) activity: Option<RoomActivity>,
}

/// How a room's stream ids are made: `(n - 1) * step + offset + 1`, n counting from 1.
#[derive(Debug, Clone, Copy)]
pub(super) struct StreamIds {
    pub(super) step: i64,
    pub(super) offset: i64,
}

impl Default for StreamIds {
    fn default() -> Self {
        StreamIds { step: 1, offset: 0 }
    }
}

/// Where a room's changes are told: the platform's activity, its service's webhook, and
/// the other nodes' parts of the room.
pub(super) struct RoomActivity {
    pub(super) activity: Option<ServiceActivity>,
    pub(super) webhooks: Option<Arc<Webhooks>>,
    pub(super) relay: Option<super::relay::Relay>,
    pub(super) service_id: Arc<str>,
    pub(super) room_id: RoomId,
}

/// The activity event of a room event told to its participants.
fn activity_event(kind: EventKind) -> Option<&'static str> {
    Some(match kind {
        EventKind::ParticipantJoined => "participant.joined",
        EventKind::ParticipantLeft => "participant.left",
        EventKind::StreamPublished => "stream.published",
        EventKind::StreamUnpublished => "stream.unpublished",
        EventKind::Kicked => "participant.kicked",
        EventKind::InactivatedStream => "stream.inactivated",
        _ => return None,
    })
}

pub(super) struct Room {
    pub(super) room_id: RoomId,
    pub(super) state: Mutex<RoomState>,
}

pub(super) fn event(
    kind: EventKind,
    room_id: &RoomId,
    participant_id: Option<&ParticipantId>,
    stream_id: Option<i64>,
) -> Bytes {
    let at = jiff::Timestamp::now()
        .round(jiff::Unit::Millisecond)
        .unwrap_or_else(|_| jiff::Timestamp::now());
    let msg = ServerMessage::Event(Event {
        event: kind,
        room_id: room_id.to_string(),
        participant_id: participant_id.map(ToString::to_string),
        stream_id,
        at: format!("{at:.3}"),
    });
    Bytes::from(serde_json::to_vec(&msg).expect("events serialise"))
}

impl RoomState {
    pub(super) fn changed(&mut self) {
        self.listing = None;
    }

    /// A new stream of the participant: the others are told. Its id.
    pub(super) fn add_stream(&mut self, room_id: &RoomId, participant_id: &ParticipantId) -> i64 {
        self.next_stream_id += 1;
        let sid = (self.next_stream_id - 1) * self.stream_ids.step + self.stream_ids.offset + 1;
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
    pub(super) fn enter(
        &mut self,
        room_id: &RoomId,
        participant_id: &ParticipantId,
        conn: ConnId,
        outbox: Option<Outbox>,
    ) {
        let fresh = Participant {
            conn,
            outbox,
            streams: BTreeSet::new(),
            media: BTreeMap::new(),
            watching: 0,
        };
        self.participants.insert(participant_id.clone(), fresh);
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
    pub(super) fn remove(&mut self, room_id: &RoomId, participant_id: &ParticipantId) {
        self.participants.shift_remove(participant_id);
        self.announce(
            EventKind::ParticipantLeft,
            room_id,
            participant_id,
            None,
            None,
        );
    }

    /// Tells everyone but `except` what happened to the participant (and its stream), and
    /// records it.
    pub(super) fn announce(
        &self,
        kind: EventKind,
        room_id: &RoomId,
        participant_id: &ParticipantId,
        stream_id: Option<i64>,
        except: Option<&ParticipantId>,
    ) {
        self.announce_as(kind, kind, room_id, participant_id, stream_id, except);
    }

    /// [`RoomState::announce`] of what is recorded as `happened` (`ParticipantLeft` for the
    /// others is a `Kicked` for the record).
    pub(super) fn announce_as(
        &self,
        kind: EventKind,
        happened: EventKind,
        room_id: &RoomId,
        participant_id: &ParticipantId,
        stream_id: Option<i64>,
        except: Option<&ParticipantId>,
    ) {
        let ev = event(kind, room_id, Some(participant_id), stream_id);
        self.broadcast(&ev, except);
        if let Some(a) = &self.activity
            && let Some(relay) = &a.relay
        {
            let _ = relay.send(super::relay::Relayed {
                service: a.service_id.clone(),
                room: room_id.clone(),
                text: String::from_utf8_lossy(&ev).into_owned(),
                except: except.cloned(),
            });
        }
        if let Some(name) = activity_event(happened) {
            let detail = stream_id.map_or(Value::Null, |s| json!({ "streamId": s }));
            self.record(name, Some(participant_id), detail);
        }
    }

    /// Records what happened in the room (to the participant, if given): in the activity,
    /// and as an event of the service's webhook.
    pub(super) fn record(
        &self,
        event: &str,
        participant_id: Option<&ParticipantId>,
        detail: Value,
    ) {
        let Some(a) = &self.activity else {
            return;
        };
        if let Some(webhooks) = &a.webhooks {
            webhooks.room_changed(&a.service_id, &a.room_id, event, participant_id, &detail);
        }
        if let Some(activity) = &a.activity {
            match participant_id {
                Some(pid) => activity.record(event, &[&a.service_id, &a.room_id, &pid], detail),
                None => activity.record(event, &[&a.service_id, &a.room_id], detail),
            }
        }
    }

    /// Queues `text` to everyone in this node's part of the room but `except`.
    pub(super) fn broadcast(&self, text: &Bytes, except: Option<&ParticipantId>) {
        for (pid, p) in &self.participants {
            if Some(pid) != except {
                p.send(Outbound::Text(text.clone()));
            }
        }
    }

    /// Tells the others that these streams of `participant_id` ended.
    pub(super) fn unpublished(
        &self,
        room_id: &RoomId,
        participant_id: &ParticipantId,
        streams: &BTreeSet<i64>,
    ) {
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

    pub(super) fn info(&self) -> Vec<ParticipantInfo> {
        self.participants
            .iter()
            .map(|(pid, p)| ParticipantInfo {
                participant_id: pid.to_string(),
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
    pub(super) fn lock(&self) -> MutexGuard<'_, RoomState> {
        self.state.lock().expect("room lock")
    }

    /// Adds (or replaces) a participant; `None` if the room closed meanwhile.
    pub(super) fn join(
        &self,
        participant_id: &ParticipantId,
        conn: ConnId,
        outbox: Outbox,
    ) -> Option<Joined> {
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
    pub(super) fn leave(&self, participant_id: &ParticipantId, conn: ConnId) -> bool {
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

    pub(super) fn publish(&self, participant_id: &ParticipantId, conn: ConnId) -> Option<i64> {
        let mut st = self.lock();
        st.participants
            .get(participant_id)
            .filter(|p| p.conn == conn && p.outbox.is_some())?;
        Some(st.add_stream(&self.room_id, participant_id))
    }

    pub(super) fn unpublish(
        &self,
        participant_id: &ParticipantId,
        conn: ConnId,
        stream_id: i64,
    ) -> bool {
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
    pub(super) fn media_started(
        &self,
        participant_id: &ParticipantId,
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
    pub(super) fn media_ended(
        &self,
        participant_id: &ParticipantId,
        stream_id: Option<i64>,
    ) -> bool {
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
