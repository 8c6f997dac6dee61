//! Media (CONTRACT §1 "Media"): a WebRTC SFU on str0m. A WHIP publisher's stream is
//! received in its room's task and forwarded as sent, frame by frame and never transcoded,
//! to the stream's WHEP subscribers. All of it goes through one UDP address
//! (`live.media_addr`); ICE is lite (kep only answers), DTLS-SRTP protects the media, and
//! str0m handles RTCP (receiver reports, NACK and retransmission, TWCC); keyframe requests
//! are handed from subscribers to their publisher. Each subscriber's bandwidth is
//! estimated: it picks the subscriber's simulcast layer (`simulcast`), or, for a video in
//! one layer, bounds the publisher's bitrate (REMB).

mod room;
mod simulcast;
mod udp;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;
use kep_core::secret::random_token;
use str0m::bwe::Bitrate;
use str0m::change::SdpOffer;
use str0m::media::{MediaKind, Mid};
use str0m::{Candidate, IceCreds, Rtc};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::LiveError;
use crate::ids::{ParticipantId, RoomId};
use room::{Command, Session};
use udp::Route;

/// A room of a service.
pub type RoomKey = (Arc<str>, RoomId);

/// A session that ended, for whoever keeps the rooms: a publisher's stream is then gone.
pub struct Gone {
    pub room: RoomKey,
    pub session_id: String,
    ufrag: Arc<str>,
    pub participant_id: ParticipantId,
    /// The stream it published or subscribed to.
    pub stream_id: i64,
    pub publisher: bool,
}

/// A track of a session, as its answer set it.
struct Track {
    mid: Mid,
    kind: MediaKind,
    /// The name of its first codec.
    codec: String,
    /// The `rid`s of its simulcast layers, when a publisher sends more than one.
    layers: Vec<String>,
}

/// The offer with its `sendrecv` sections made to go the role's one way (a publisher's
/// `sendonly`, a subscriber's `recvonly`), so that str0m answers them `recvonly` and
/// `sendonly`: kep never sends to a publisher nor takes media from a subscriber, and an
/// answer `sendrecv` would announce send streams that never come.
fn one_way(offer: &str, role: &Role) -> String {
    let theirs = match role {
        Role::Publish => "a=sendonly",
        Role::Subscribe => "a=recvonly",
    };
    offer
        .split_inclusive('\n')
        .map(|line| match line.trim_end() {
            "a=sendrecv" => line.replacen("a=sendrecv", theirs, 1),
            _ => line.to_owned(),
        })
        .collect()
}

/// The answer with kep's candidates in every accepted section, not only the first of the
/// bundle as str0m (after JSEP) writes it. A client that takes its candidates from the
/// last section of a transport then has none and never connects: aiortc under
/// `max-bundle`, where every section shares one transport. Browsers read the first
/// section's and pass over the rest, as they do with Pion's and Janus's answers, which
/// repeat them too.
fn candidates_in_every_section(answer: &str) -> String {
    let ours: Vec<&str> = answer
        .split("\r\n")
        .filter(|l| l.starts_with("a=candidate:") || *l == "a=end-of-candidates")
        .collect();
    let mut out = String::with_capacity(answer.len() * 2);
    // Whether the section so far is accepted media without candidates.
    let mut lacking = false;
    let close = |out: &mut String, lacking: bool| {
        if lacking {
            for line in &ours {
                out.push_str(line);
                out.push_str("\r\n");
            }
        }
    };
    for line in answer.split_terminator("\r\n") {
        if let Some(media) = line.strip_prefix("m=") {
            close(&mut out, lacking);
            lacking = media.split(' ').nth(1) != Some("0");
        } else if line.starts_with("a=candidate:") {
            lacking = false;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    close(&mut out, lacking);
    out
}

/// The tracks an answer accepted for `role`: its media sections that are not rejected
/// (port 0), go the role's way (kep receives a publisher's, sends to a subscriber) and
/// kept a codec. (str0m tells of tracks only once connected.)
fn tracks_of(answer: &str, role: &Role) -> Vec<Track> {
    let wanted = match role {
        Role::Publish => "a=recvonly",
        Role::Subscribe => "a=sendonly",
    };
    answer
        .split("\r\nm=")
        .skip(1)
        .filter_map(|section| {
            let mut words = section.lines().next()?.split(' ');
            let kind = match words.next()? {
                "audio" => MediaKind::Audio,
                "video" => MediaKind::Video,
                _ => return None,
            };
            let accepted = words.next()? != "0";
            let pt = words.nth(1)?;
            let mid = section.lines().find_map(|l| l.strip_prefix("a=mid:"))?;
            let goes = section.lines().any(|l| l == wanted);
            let rtpmap = format!("a=rtpmap:{pt} ");
            let codec = section
                .lines()
                .find_map(|l| l.strip_prefix(rtpmap.as_str()))
                .and_then(|c| c.split('/').next())?;
            // `a=simulcast:recv h;m;l`: alternatives are split by `,`, paused ones start `~`.
            let layers = section
                .lines()
                .find_map(|l| l.strip_prefix("a=simulcast:recv "))
                .map(|rids| {
                    rids.split([';', ','])
                        .map(|rid| rid.trim().trim_start_matches('~').to_owned())
                        .collect()
                })
                .unwrap_or_default();
            (accepted && goes).then(|| Track {
                mid: Mid::from(mid.trim()),
                kind,
                codec: codec.to_owned(),
                layers,
            })
        })
        .collect()
}

/// What a session is for.
pub enum Role {
    Publish,
    Subscribe,
}

/// Where a session's resource lives (RFC 9725): under WHIP, or under WHEP at the stream it
/// watches. `PATCH` and `DELETE` reach a session only at its own URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionUrl {
    Whip,
    Whep(i64),
}

/// Whose a live session is, and at which URL.
struct Owner {
    room: RoomKey,
    participant_id: ParticipantId,
    url: SessionUrl,
}

/// An offer answered: the session, ready to start in its room.
pub struct Negotiated {
    rtc: Rtc,
    ufrag: Arc<str>,
    tracks: Vec<Track>,
    pub answer: String,
}

impl Negotiated {
    /// Its tracks as `Room.ListParticipants` shows them.
    pub fn tracks(&self) -> Vec<kep_api::live::TrackInfo> {
        self.tracks
            .iter()
            .map(|t| kep_api::live::TrackInfo {
                kind: t.kind.to_string(),
                codec: t.codec.clone(),
                layers: t.layers.clone(),
            })
            .collect()
    }
}

/// The cluster's topic: which node runs a room's media (the body `{service, room}`; the
/// reply, that node's live URL).
pub const WHERE: &str = "live.media";

pub struct Media {
    socket: Arc<UdpSocket>,
    local: SocketAddr,
    /// The address put in answers: the bound one, or `media_public_ip` with its port.
    candidate: SocketAddr,
    routes: mpsc::UnboundedSender<Route>,
    rooms: DashMap<RoomKey, mpsc::UnboundedSender<Command>>,
    /// Every live session's owner, for `PATCH` and `DELETE`.
    sessions: DashMap<String, Owner>,
    gone: mpsc::UnboundedSender<Gone>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl Media {
    /// Binds the media address and starts its reader. Sessions that end are told to
    /// `gone`'s receiver.
    pub async fn bind(
        addr: SocketAddr,
        public_ip: Option<IpAddr>,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> anyhow::Result<(Media, mpsc::UnboundedReceiver<Gone>)> {
        let socket = UdpSocket::bind(addr)
            .await
            .map_err(|e| kep_core::listener::not_bound("the media address", addr, e))?;
        let local = socket.local_addr()?;
        let socket = Arc::new(socket);
        let (routes, routed) = mpsc::unbounded_channel();
        tasks.spawn(udp::read(Arc::clone(&socket), routed, shutdown.clone()));
        let (gone, gone_rx) = mpsc::unbounded_channel();
        let media = Media {
            candidate: SocketAddr::new(public_ip.unwrap_or(local.ip()), local.port()),
            socket,
            local,
            routes,
            rooms: DashMap::new(),
            sessions: DashMap::new(),
            gone,
            tasks,
            shutdown,
        };
        Ok((media, gone_rx))
    }

    /// Whether the room's media runs here.
    pub fn has_room(&self, room: &RoomKey) -> bool {
        self.rooms.contains_key(room)
    }

    /// The bound media address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Answers an SDP offer for `role`: 400 when it is no offer, or has no track kep can
    /// take (publish: Opus or VP8/H.264 it sends; subscribe: that it receives).
    pub fn negotiate(&self, offer: &str, role: &Role) -> Result<Negotiated, LiveError> {
        let bad = |why: String| LiveError::InvalidOffer(why);
        let offer = SdpOffer::from_sdp_string(&one_way(offer, role))
            .map_err(|e| bad(format!("not an SDP offer: {e}")))?;
        let creds = IceCreds::new();
        let ufrag: Arc<str> = creds.ufrag.as_str().into();
        // A subscriber's bandwidth is estimated (TWCC, str0m's GoogCC), to choose its
        // simulcast layer. It starts at 1 Mbit/s: a middle layer at once, the best soon.
        let bwe = matches!(role, Role::Subscribe).then_some(Bitrate::mbps(1));
        let mut rtc = Rtc::builder()
            .enable_bwe(bwe)
            .set_ice_lite(true)
            .set_local_ice_credentials(creds)
            .clear_codecs()
            .enable_opus(true, false)
            .enable_vp8(true)
            .enable_h264(true)
            .build(Instant::now());
        let candidate = Candidate::host(self.candidate, "udp")
            .map_err(|e| LiveError::Internal(anyhow::anyhow!("media candidate: {e}")))?;
        rtc.add_local_candidate(candidate);
        let answer = rtc
            .sdp_api()
            .accept_offer(offer)
            .map_err(|e| bad(format!("the offer cannot be answered: {e}")))?;
        let answer = candidates_in_every_section(&answer.to_sdp_string());
        let tracks = tracks_of(&answer, role);
        if tracks.is_empty() {
            let what = match role {
                Role::Publish => "sends",
                Role::Subscribe => "receives",
            };
            return Err(bad(format!(
                "the offer has no track kep can use: one that {what} Opus, VP8 or H.264"
            )));
        }
        Ok(Negotiated {
            rtc,
            ufrag,
            tracks,
            answer,
        })
    }

    /// Starts a negotiated session in its room: a publisher of `stream_id`, or a subscriber
    /// to it (404 when the room has no such stream's publisher). Its id, for `DELETE`.
    pub async fn start(
        &self,
        room: &RoomKey,
        participant_id: &ParticipantId,
        stream_id: i64,
        role: Role,
        n: Negotiated,
    ) -> Result<String, LiveError> {
        let session = Session {
            id: random_token(16),
            ufrag: n.ufrag.clone(),
            participant_id: participant_id.clone(),
            stream_id,
            publisher: matches!(role, Role::Publish),
            rtc: n.rtc,
            tracks: n.tracks.into_iter().map(|t| (t.mid, t.kind)).collect(),
            keyframe_requests: Vec::new(),
            selection: Default::default(),
            estimate: None,
            last_remb: None,
            desired: 0,
            ending: false,
            dirty: true,
            due: Instant::now(),
        };
        let id = session.id.clone();
        let url = match role {
            Role::Publish => SessionUrl::Whip,
            Role::Subscribe => SessionUrl::Whep(stream_id),
        };
        let owner = Owner {
            room: room.clone(),
            participant_id: participant_id.clone(),
            url,
        };
        self.sessions.insert(id.clone(), owner);
        let tx = self.room(room);
        let _ = self.routes.send(Route::Add(n.ufrag.clone(), tx.clone()));
        match role {
            Role::Publish => {
                let _ = tx.send(Command::Publisher(session));
            }
            Role::Subscribe => {
                let (reply, answer) = oneshot::channel();
                let _ = tx.send(Command::Subscriber(session, reply));
                if answer.await != Ok(true) {
                    self.sessions.remove(&id);
                    let _ = self.routes.send(Route::Forget(n.ufrag));
                    return Err(LiveError::StreamNotFound { stream_id });
                }
            }
        }
        Ok(id)
    }

    /// The room's task, started if it has none.
    fn room(&self, key: &RoomKey) -> mpsc::UnboundedSender<Command> {
        self.rooms
            .entry(key.clone())
            .or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                let room = room::Room {
                    key: key.clone(),
                    socket: Arc::clone(&self.socket),
                    local: self.local,
                    sessions: Vec::new(),
                    layers: Default::default(),
                    gone: self.gone.clone(),
                };
                self.tasks.spawn(room.run(rx, self.shutdown.clone()));
                tx
            })
            .clone()
    }

    fn tell(&self, room: &RoomKey, command: Command) {
        if let Some(tx) = self.rooms.get(room) {
            let _ = tx.send(command);
        }
    }

    /// Whether the session is the participant's, in the room, at that URL.
    fn is_theirs(
        &self,
        room: &RoomKey,
        participant_id: &ParticipantId,
        url: SessionUrl,
        session_id: &str,
    ) -> bool {
        self.sessions
            .get(session_id)
            .is_some_and(|s| s.room == *room && s.participant_id == *participant_id && s.url == url)
    }

    /// Ends the participant's session in the room; false when it has no such session at
    /// that URL.
    pub fn end_session(
        &self,
        room: &RoomKey,
        participant_id: &ParticipantId,
        url: SessionUrl,
        session_id: &str,
    ) -> bool {
        let theirs = self.is_theirs(room, participant_id, url, session_id);
        if theirs {
            self.tell(room, Command::EndSession(session_id.to_owned()));
        }
        theirs
    }

    /// Hands the participant's session candidates its peer trickled (RFC 8840); false when
    /// it has no such session at that URL.
    pub fn trickle(
        &self,
        room: &RoomKey,
        participant_id: &ParticipantId,
        url: SessionUrl,
        session_id: &str,
        candidates: Vec<Candidate>,
    ) -> bool {
        let theirs = self.is_theirs(room, participant_id, url, session_id);
        if theirs && !candidates.is_empty() {
            self.tell(room, Command::Candidates(session_id.to_owned(), candidates));
        }
        theirs
    }

    pub fn end_stream(&self, room: &RoomKey, stream_id: i64) {
        self.tell(room, Command::EndStream(stream_id));
    }

    pub fn end_participant(&self, room: &RoomKey, participant_id: &ParticipantId) {
        self.tell(room, Command::EndParticipant(participant_id.clone()));
    }

    /// The room is gone: its task ends, and every session in it.
    pub fn end_room(&self, room: &RoomKey) {
        if let Some((_, tx)) = self.rooms.remove(room) {
            let _ = tx.send(Command::EndRoom);
        }
    }

    /// A session's end has been seen to: its datagrams go nowhere from now on.
    pub fn forget(&self, gone: &Gone) {
        self.sessions.remove(&gone.session_id);
        let _ = self.routes.send(Route::Forget(gone.ufrag.clone()));
    }
}

#[cfg(test)]
mod tests;
