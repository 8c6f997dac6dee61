//! One room's media: a task that owns the room's WebRTC sessions (str0m `Rtc`s), feeds them
//! the datagrams the demultiplexer routes to it, and forwards what a publisher sends to the
//! subscribers of its stream. Rooms never share a lock: each is a task of its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use str0m::media::{KeyframeRequestKind, MediaData, MediaKind, Mid};
use str0m::net::{Protocol, Receive};
use str0m::{Event, IceConnectionState, Input, Output, Rtc};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Gone, RoomKey};

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
    /// The stream's publisher and subscribers.
    EndStream(i64),
    /// Every session of the participant.
    EndParticipant(String),
    /// The room ended: every session, and the task.
    EndRoom,
}

pub(super) struct Session {
    pub(super) id: String,
    pub(super) ufrag: Arc<str>,
    pub(super) participant_id: String,
    pub(super) stream_id: i64,
    pub(super) publisher: bool,
    pub(super) rtc: Rtc,
    /// The tracks it carries, as the offer's answer set them.
    pub(super) tracks: Vec<(Mid, MediaKind)>,
    pub(super) last_keyframe_request: Option<Instant>,
    /// Closed by kep: it goes once its goodbye (BYE, close_notify) is sent.
    pub(super) ending: bool,
}

impl Session {
    fn mid_of(&self, kind: MediaKind) -> Option<Mid> {
        self.tracks.iter().find(|t| t.1 == kind).map(|t| t.0)
    }

    fn kind_of(&self, mid: Mid) -> Option<MediaKind> {
        self.tracks.iter().find(|t| t.0 == mid).map(|t| t.1)
    }

    /// Asks the publisher for a keyframe of its video, at most once a second.
    fn request_keyframe(&mut self, kind: KeyframeRequestKind) {
        let now = Instant::now();
        if self
            .last_keyframe_request
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        let Some(mid) = self.mid_of(MediaKind::Video) else {
            return;
        };
        if let Some(mut writer) = self.rtc.writer(mid)
            && writer.request_keyframe(None, kind).is_ok()
        {
            self.last_keyframe_request = Some(now);
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
    Keyframe(i64),
}

pub(super) struct Room {
    pub(super) key: RoomKey,
    pub(super) socket: Arc<UdpSocket>,
    pub(super) local: SocketAddr,
    pub(super) sessions: Vec<Session>,
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
                    let now = Instant::now();
                    for s in &mut self.sessions {
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
                        publisher.last_keyframe_request = None;
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
                let Ok(receive) = Receive::new(Protocol::Udp, source, self.local, &data) else {
                    return;
                };
                if let Err(e) = s.rtc.handle_input(Input::Receive(at, receive)) {
                    tracing::debug!(session = s.id, error = %e, "media session failed");
                    s.rtc.disconnect();
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
            if s.rtc.close().is_err() {
                s.rtc.disconnect();
            }
        }
    }

    /// Polls every session until each waits for time to pass, hands what publishers sent to
    /// their subscribers (and subscribers' keyframe requests to their publishers), and
    /// returns when the next session needs its clock moved on.
    fn drive(&mut self) -> Instant {
        loop {
            let mut deadline = Instant::now() + Duration::from_secs(1);
            let mut forwards = Vec::new();
            for s in &mut self.sessions {
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
                            deadline = deadline.min(t);
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
                return deadline;
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
                    s.request_keyframe(KeyframeRequestKind::Fir);
                }
                let kind = s.kind_of(data.mid)?;
                Some(Forward::Media(s.stream_id, kind, data))
            }
            Event::KeyframeRequest(_) if !s.publisher => Some(Forward::Keyframe(s.stream_id)),
            Event::Connected if !s.publisher => Some(Forward::Keyframe(s.stream_id)),
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
                for s in &mut self.sessions {
                    if s.publisher || s.stream_id != stream_id || !s.rtc.is_alive() {
                        continue;
                    }
                    let Some(mid) = s.mid_of(kind) else { continue };
                    let Some(writer) = s.rtc.writer(mid) else {
                        continue;
                    };
                    // The subscriber's payload type for the publisher's codec; none: the
                    // subscriber cannot take it, and gets nothing of this track.
                    let Some(pt) = writer.match_params(data.params) else {
                        continue;
                    };
                    if let Err(e) =
                        writer.write(pt, data.network_time, data.time, data.data.clone())
                    {
                        tracing::debug!(session = s.id, error = %e, "forwarding failed");
                        s.rtc.disconnect();
                    }
                }
            }
            Forward::Keyframe(stream_id) => {
                if let Some(p) = self
                    .sessions
                    .iter_mut()
                    .find(|s| s.publisher && s.stream_id == stream_id)
                {
                    p.request_keyframe(KeyframeRequestKind::Pli);
                }
            }
        }
    }

    /// Drops the sessions that ended, saying so.
    fn reap(&mut self) {
        let (gone, key) = (&self.gone, &self.key);
        self.sessions.retain(|s| {
            if s.rtc.is_alive() {
                return true;
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
