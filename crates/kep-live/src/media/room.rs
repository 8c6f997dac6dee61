//! One room's media: a task that owns the room's WebRTC sessions (str0m `Rtc`s), feeds them
//! the datagrams the demultiplexer routes to it, and forwards what a publisher sends to the
//! subscribers of its stream. Rooms never share a lock: each is a task of its own.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use str0m::bwe::{Bitrate, BweKind};
use str0m::media::{KeyframeRequestKind, MediaData, MediaKind, Mid, Rid};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::simulcast::{Layers, Selection};
use super::{Gone, RoomKey};
use crate::ids::ParticipantId;

/// What a room's task is asked to do.
pub(super) enum Command {
    Publisher(Session),
    /// A subscriber of its stream; refused (false) when the stream has no publisher here.
    Subscriber(Session, oneshot::Sender<bool>),
    /// A datagram for the session whose ICE user fragment is `ufrag`.
    Datagram {
        ufrag: Arc<str>,
        source: SocketAddr,
        at: Instant,
        data: Vec<u8>,
    },
    EndSession(String),
    /// Candidates the session's peer trickled.
    Candidates(String, Vec<Candidate>),
    /// The stream's publisher and subscribers.
    EndStream(i64),
    /// Every session of the participant.
    EndParticipant(ParticipantId),
    /// The room ended: every session, and the task.
    EndRoom,
}

pub(super) struct Session {
    pub(super) id: String,
    pub(super) ufrag: Arc<str>,
    pub(super) participant_id: ParticipantId,
    pub(super) stream_id: i64,
    pub(super) publisher: bool,
    pub(super) rtc: Rtc,
    /// The tracks it carries, as the offer's answer set them.
    pub(super) tracks: Vec<(Mid, MediaKind)>,
    /// When a publisher was last asked for a keyframe, of each layer.
    pub(super) keyframe_requests: Vec<(Option<Rid>, Instant)>,
    /// A subscriber's layer of a simulcast video.
    pub(super) selection: Selection,
    /// A subscriber's bandwidth estimate (TWCC or REMB), in bits per second.
    pub(super) estimate: Option<u64>,
    /// When a publisher was last told its subscribers' bandwidth (REMB).
    pub(super) last_remb: Option<Instant>,
    /// The bitrate a subscriber's bandwidth estimation was last asked to reach.
    pub(super) desired: u64,
    /// Closed by kep: it goes once its goodbye (BYE, close_notify) is sent.
    pub(super) ending: bool,
    /// Given input or work since it was last polled: it must be polled again.
    pub(super) dirty: bool,
    /// When it next needs its clock moved on.
    pub(super) due: Instant,
}

impl Session {
    fn mid_of(&self, kind: MediaKind) -> Option<Mid> {
        self.tracks.iter().find(|t| t.1 == kind).map(|t| t.0)
    }

    fn kind_of(&self, mid: Mid) -> Option<MediaKind> {
        self.tracks.iter().find(|t| t.0 == mid).map(|t| t.1)
    }

    /// Has a subscriber's bandwidth estimation probe up to what its stream's best layer
    /// needs, with a quarter more for audio and overhead.
    fn want_bitrate(&mut self, top: u64) {
        // In steps of 100 kbit/s, so that a layer's jitter does not reset it every frame.
        let want = (top * 5 / 4 / 100_000 + 1) * 100_000;
        if want != self.desired {
            self.desired = want;
            self.dirty = true;
            self.rtc.bwe().set_desired_bitrate(Bitrate::bps(want));
        }
    }

    /// Tells a publisher (REMB) the bandwidth its video `mid` may take, once a second.
    fn tell_bandwidth(&mut self, mid: Mid, bps: u64) {
        let now = Instant::now();
        if self
            .last_remb
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        self.dirty = true;
        if let Some(rx) = self.rtc.direct_api().stream_rx_by_mid(mid, None) {
            rx.request_remb(Bitrate::bps(bps));
            self.last_remb = Some(now);
        }
    }

    /// Asks the publisher for a keyframe of its video (of layer `rid`, when simulcast), at
    /// most once a second.
    fn request_keyframe(&mut self, rid: Option<Rid>, kind: KeyframeRequestKind) {
        let now = Instant::now();
        let asked = self.keyframe_requests.iter().find(|r| r.0 == rid);
        if asked.is_some_and(|r| now.duration_since(r.1) < Duration::from_secs(1)) {
            return;
        }
        let Some(mid) = self.mid_of(MediaKind::Video) else {
            return;
        };
        self.dirty = true;
        if let Some(mut writer) = self.rtc.writer(mid)
            && writer.request_keyframe(rid, kind).is_ok()
        {
            self.keyframe_requests.retain(|r| r.0 != rid);
            self.keyframe_requests.push((rid, now));
        }
    }
}

/// What one pass over the sessions found to hand from one session to others.
#[expect(
    clippy::large_enum_variant,
    reason = "short-lived in one pass's Vec: boxing would allocate per frame"
)]
enum Forward {
    Media(i64, MediaKind, MediaData),
    /// A keyframe of the stream's video (of that layer, when simulcast).
    Keyframe(i64, Option<Rid>),
}

pub(super) struct Room {
    pub(super) key: RoomKey,
    pub(super) socket: Arc<UdpSocket>,
    pub(super) local: SocketAddr,
    pub(super) sessions: Vec<Session>,
    /// The layers of each stream's video.
    pub(super) layers: HashMap<i64, Layers>,
    pub(super) gone: mpsc::UnboundedSender<Gone>,
}

impl Room {
    pub(super) async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        shutdown: CancellationToken,
    ) {
        loop {
            let deadline = self.drive();
            tokio::select! {
                command = commands.recv() => match command {
                    Some(command) => {
                        // The room ended: its sessions end with it, and so does the task.
                        let ending = matches!(command, Command::EndRoom);
                        self.command(command);
                        if ending {
                            break;
                        }
                    }
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline.into()) => {
                    // Only the sessions that are due: a paced subscriber wakes the room
                    // often, and the others need nothing then.
                    let now = Instant::now();
                    for s in self.sessions.iter_mut().filter(|s| s.due <= now) {
                        s.dirty = true;
                        if let Err(e) = s.rtc.handle_input(Input::Timeout(now)) {
                            tracing::debug!(session = s.id, error = %e, "media session failed");
                            s.rtc.disconnect();
                        }
                    }
                }
                () = shutdown.cancelled() => break,
            }
            self.reap();
        }
        // The room ended (or the platform stops): every session says goodbye, then goes.
        self.end(|_| true);
        self.drive();
        for s in &mut self.sessions {
            s.rtc.disconnect();
        }
        self.reap();
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Publisher(s) => self.sessions.push(s),
            Command::Subscriber(s, reply) => {
                let live = self
                    .sessions
                    .iter_mut()
                    .find(|p| p.publisher && p.stream_id == s.stream_id && !p.ending);
                match live {
                    Some(publisher) => {
                        // A keyframe soon, so the newcomer can decode at once.
                        publisher.keyframe_requests.clear();
                        let _ = reply.send(true);
                        self.sessions.push(s);
                    }
                    None => {
                        let _ = reply.send(false);
                    }
                }
            }
            Command::Datagram {
                ufrag,
                source,
                at,
                data,
            } => {
                let Some(s) = self.sessions.iter_mut().find(|s| s.ufrag == ufrag) else {
                    return;
                };
                s.dirty = true;
                let Ok(receive) = Receive::new(Protocol::Udp, source, self.local, &data) else {
                    return;
                };
                if let Err(e) = s.rtc.handle_input(Input::Receive(at, receive)) {
                    tracing::debug!(session = s.id, error = %e, "media session failed");
                    s.rtc.disconnect();
                }
            }
            Command::Candidates(id, candidates) => {
                if let Some(s) = self.sessions.iter_mut().find(|s| s.id == id) {
                    s.dirty = true;
                    for c in candidates {
                        s.rtc.add_remote_candidate(c);
                    }
                }
            }
            Command::EndSession(id) => self.end(|s| s.id == id),
            Command::EndStream(stream_id) => self.end(|s| s.stream_id == stream_id),
            Command::EndParticipant(pid) => self.end(|s| s.participant_id == pid),
            Command::EndRoom => self.end(|_| true),
        }
    }

    /// Closes the sessions: an RTCP BYE and a DTLS close_notify tell the peer at once (a
    /// session that never connected is just dropped); each goes once that is sent.
    fn end(&mut self, which: impl Fn(&Session) -> bool) {
        for s in self.sessions.iter_mut().filter(|s| which(s)) {
            s.ending = true;
            s.dirty = true;
            if s.rtc.close().is_err() {
                s.rtc.disconnect();
            }
        }
    }

    /// Polls every session given input or work until each waits for time to pass, hands
    /// what publishers sent to their subscribers (and subscribers' keyframe requests to
    /// their publishers), and returns when the next session needs its clock moved on.
    fn drive(&mut self) -> Instant {
        loop {
            let mut forwards = Vec::new();
            for s in self.sessions.iter_mut().filter(|s| s.dirty) {
                while s.rtc.is_alive() {
                    match s.rtc.poll_output() {
                        Ok(Output::Transmit(t)) => {
                            // UDP: a datagram the socket cannot take now is lost, as on a wire.
                            let _ = self.socket.try_send_to(&t.contents, t.destination);
                        }
                        Ok(Output::Timeout(t)) => {
                            // What a closed session had to say is sent: it goes now,
                            // rather than when str0m's drain ends.
                            if s.ending {
                                s.rtc.disconnect();
                            }
                            s.due = t;
                            s.dirty = false;
                            break;
                        }
                        Ok(Output::Event(event)) => {
                            if let Some(f) = Self::event(s, event) {
                                forwards.push(f);
                            }
                        }
                        Err(e) => {
                            tracing::debug!(session = s.id, error = %e, "media session failed");
                            s.rtc.disconnect();
                        }
                    }
                }
            }
            if forwards.is_empty() {
                let idle = Instant::now() + Duration::from_secs(1);
                return self.sessions.iter().map(|s| s.due).fold(idle, Instant::min);
            }
            for f in forwards {
                self.forward(f);
            }
        }
    }

    fn event(s: &mut Session, event: Event) -> Option<Forward> {
        match event {
            Event::MediaData(data) if s.publisher => {
                if !data.contiguous {
                    s.request_keyframe(data.rid, KeyframeRequestKind::Fir);
                }
                let kind = s.kind_of(data.mid)?;
                Some(Forward::Media(s.stream_id, kind, data))
            }
            Event::KeyframeRequest(_) | Event::Connected if !s.publisher => {
                Some(Forward::Keyframe(s.stream_id, s.selection.current()))
            }
            Event::EgressBitrateEstimate(
                BweKind::Twcc { estimate, .. } | BweKind::Remb { estimate, .. },
            ) => {
                s.estimate = Some(estimate.as_u64());
                None
            }
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                s.rtc.disconnect();
                None
            }
            _ => None,
        }
    }

    fn forward(&mut self, f: Forward) {
        match f {
            Forward::Media(stream_id, kind, data) => {
                let video = (kind == MediaKind::Video).then(|| {
                    let layers = self.layers.entry(stream_id).or_default();
                    layers.record(data.rid, data.data.len(), data.network_time);
                    &*layers
                });
                let mut keyframes = Vec::new();
                // The least bandwidth of the subscribers: what one video may take.
                let mut least: Option<u64> = None;
                // What the best layer needs: the same for every subscriber of this frame.
                let top = video.map(|layers| layers.top(data.network_time));
                for s in &mut self.sessions {
                    if s.publisher || s.stream_id != stream_id || !s.rtc.is_alive() {
                        continue;
                    }
                    let mut time = data.time;
                    if let (Some(layers), Some(top)) = (video, top) {
                        s.want_bitrate(top);
                        if let Some(e) = s.estimate {
                            least = Some(least.map_or(e, |l| l.min(e)));
                        }
                        // Simulcast: the subscriber's own layer, on its own clock.
                        if data.rid.is_some() {
                            let admitted = s.selection.admit(layers, s.estimate, &data);
                            keyframes.extend(admitted.awaiting);
                            let Some(t) = admitted.time else { continue };
                            time = t;
                        }
                    }
                    let Some(mid) = s.mid_of(kind) else { continue };
                    s.dirty = true;
                    let Some(writer) = s.rtc.writer(mid) else {
                        continue;
                    };
                    // The subscriber's payload type for the publisher's codec; none: the
                    // subscriber cannot take it, and gets nothing of this track.
                    let Some(pt) = writer.match_params(data.params) else {
                        continue;
                    };
                    if let Err(e) = writer.write(pt, data.network_time, time, data.data.clone()) {
                        tracing::debug!(session = s.id, error = %e, "forwarding failed");
                        s.rtc.disconnect();
                    }
                }
                keyframes.dedup();
                for rid in keyframes {
                    self.forward(Forward::Keyframe(stream_id, Some(rid)));
                }
                // One video for all: the publisher is told to fit the narrowest subscriber.
                if let (None, Some(bps)) = (data.rid, least)
                    && let Some(p) = self.publisher_of(stream_id)
                {
                    p.tell_bandwidth(data.mid, bps);
                }
            }
            Forward::Keyframe(stream_id, rid) => {
                if let Some(p) = self.publisher_of(stream_id) {
                    p.request_keyframe(rid, KeyframeRequestKind::Pli);
                }
            }
        }
    }

    fn publisher_of(&mut self, stream_id: i64) -> Option<&mut Session> {
        self.sessions
            .iter_mut()
            .find(|s| s.publisher && s.stream_id == stream_id)
    }

    /// Drops the sessions that ended, saying so.
    fn reap(&mut self) {
        let (gone, key, layers) = (&self.gone, &self.key, &mut self.layers);
        self.sessions.retain(|s| {
            if s.rtc.is_alive() {
                return true;
            }
            if s.publisher {
                layers.remove(&s.stream_id);
            }
            let _ = gone.send(Gone {
                room: key.clone(),
                session_id: s.id.clone(),
                ufrag: s.ufrag.clone(),
                participant_id: s.participant_id.clone(),
                stream_id: s.stream_id,
                publisher: s.publisher,
            });
            false
        });
    }
}
