//! `GET /api/ws`: a participant's socket. Challenge, join, then publish / unpublish /
//! leave from the participant and events from the room, until either side ends it.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::SinkExt as _;
use kep_core::limits::{Key, Peer};
use kep_core::secret::{constant_time_eq, new_uuid, random_token, sha256_hex};
use serde_json::Value;
use tokio::sync::mpsc;

use super::parse_params;
use crate::ids::{ParticipantId, RoomId, check_id};
use crate::rooms::{ConnId, Outbound, close, next_conn_id};
use crate::{Live, LiveError, LiveService};
use kep_api::live::{ClientMessage, Join, ServerMessage, Unpublish};

/// Largest frame a participant may send; its messages are a few hundred bytes.
const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// `GET /api/ws`
pub(crate) async fn participant_socket(
    State(live): State<LiveService>,
    Peer(peer): Peer,
    ws: WebSocketUpgrade,
) -> Response {
    if live.0.shutdown.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    let tracker = live.0.sockets.clone();
    // Small buffers: messages are small, and at 10,000 sockets the 128 KiB defaults would
    // cost gigabytes.
    ws.max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .on_upgrade(move |socket| tracker.track_future(session(live.0, socket, peer)))
}

struct Member {
    service_id: Arc<str>,
    room_id: RoomId,
    participant_id: ParticipantId,
    /// Whether it may publish (a join token's `publish`).
    publish: bool,
    conn: ConnId,
}

/// How a joined session ended.
enum End {
    /// The server closed it (kicked, destroyed, replaced): the room already let it go.
    ByServer,
    /// The participant said `leave`.
    Left,
    /// The socket dropped or closed: leave after the reconnect grace.
    Dropped,
    ShuttingDown,
}

async fn session(live: Arc<Live>, mut socket: WebSocket, peer: IpAddr) {
    let nonce = random_token(16);
    if send(
        &mut socket,
        &ServerMessage::Challenge {
            nonce: nonce.clone(),
        },
    )
    .await
    .is_err()
    {
        return;
    }
    let timeout = Duration::from_secs(live.settings.join_timeout_s);
    let join = tokio::select! {
        _ = live.shutdown.cancelled() => {
            close_with(&mut socket, close::GOING_AWAY, "server shutting down").await;
            return;
        }
        r = tokio::time::timeout(timeout, read_join(&mut socket)) => r,
    };
    let member = match join {
        Err(_) => {
            let err = LiveError::InvalidRequest(format!("no join within {} s", timeout.as_secs()));
            refuse(&mut socket, &err, "join timeout").await;
            return;
        }
        Ok(None) => return,
        Ok(Some(join)) => {
            let joined = join
                .map_err(|e| (e, "invalid join"))
                .and_then(|join| admit(&live, join, &nonce).map_err(|e| (e, "unauthorized")));
            // A join counts against its service's rate, one that fails against its peer's;
            // the socket it opens is not a request in flight, so it holds nothing.
            let key = match &joined {
                Ok(member) => Key::Client(Arc::clone(&member.service_id)),
                Err(_) => Key::peer(peer),
            };
            let joined = match live.limiter.admit(key) {
                Ok(_) => joined,
                Err(refusal) => Err((refusal.into(), "too many requests")),
            };
            match joined {
                Ok(member) => member,
                Err((err, reason)) => {
                    refuse(&mut socket, &err, reason).await;
                    return;
                }
            }
        }
    };

    let (outbox, mut inbox) = mpsc::unbounded_channel();
    let joined = live.rooms.join(
        &member.service_id,
        &member.room_id,
        &member.participant_id,
        member.conn,
        outbox,
    );
    // With several nodes, the room's participants on the others too.
    let participants = match live.cluster.node_id() {
        None => joined.participants,
        Some(_) => (live.room_methods)
            .participants(&member.service_id, &member.room_id)
            .await
            .unwrap_or(joined.participants),
    };
    let hello = ServerMessage::Joined {
        room_id: member.room_id.to_string(),
        participant_id: member.participant_id.to_string(),
        participants,
    };
    let end = if send(&mut socket, &hello).await.is_err() {
        End::Dropped
    } else {
        run(&live, &member, &mut socket, &mut inbox).await
    };
    match end {
        End::ByServer | End::ShuttingDown => {}
        End::Left => live.rooms.leave(
            &member.service_id,
            &member.room_id,
            &member.participant_id,
            member.conn,
        ),
        End::Dropped => {
            let grace = Duration::from_secs(live.settings.reconnect_grace_s);
            if !grace.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(grace) => {}
                    _ = live.shutdown.cancelled() => return,
                }
            }
            live.rooms.leave(
                &member.service_id,
                &member.room_id,
                &member.participant_id,
                member.conn,
            );
        }
    }
}

async fn run(
    live: &Live,
    m: &Member,
    socket: &mut WebSocket,
    inbox: &mut mpsc::UnboundedReceiver<Outbound>,
) -> End {
    loop {
        tokio::select! {
            // Room events first: a participant told to go must not act any more.
            biased;
            out = inbox.recv() => match out {
                Some(first) => {
                    if let Some(end) = deliver(live, socket, first, inbox).await {
                        return end;
                    }
                }
                None => return End::ByServer,
            },
            _ = live.shutdown.cancelled() => {
                close_with(socket, close::GOING_AWAY, "server shutting down").await;
                return End::ShuttingDown;
            }
            incoming = socket.recv() => {
                let reply = match incoming {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return End::Dropped,
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Binary(_))) => Err(LiveError::InvalidRequest("binary frames are not understood".into())),
                    Some(Ok(Message::Text(text))) => match parse_message(&text) {
                        Err(e) => Err(e),
                        Ok(ClientMessage::Join(_)) => Err(LiveError::InvalidRequest("already joined".into())),
                        Ok(ClientMessage::Leave) => {
                            live.rooms.leave(&m.service_id, &m.room_id, &m.participant_id, m.conn);
                            close_with(socket, close::NORMAL, "left").await;
                            return End::Left;
                        }
                        Ok(ClientMessage::Publish) if !m.publish => Err(LiveError::InvalidToken(
                            "the join token does not allow publishing".into(),
                        )),
                        Ok(ClientMessage::Publish) => live
                            .rooms
                            .publish(&m.service_id, &m.room_id, &m.participant_id, m.conn)
                            .map(|stream_id| ServerMessage::Published { stream_id })
                            // Only a participant the room already let go gets here.
                            .ok_or(LiveError::RoomNotFound { room_id: m.room_id.clone() }),
                        Ok(ClientMessage::Unpublish(Unpublish { stream_id })) => {
                            if live.rooms.unpublish(&m.service_id, &m.room_id, &m.participant_id, m.conn, stream_id) {
                                Ok(ServerMessage::Unpublished { stream_id })
                            } else {
                                Err(LiveError::StreamNotFound { stream_id })
                            }
                        }
                    },
                };
                let reply = reply.unwrap_or_else(|e| e.frame());
                if send(socket, &reply).await.is_err() {
                    return End::Dropped;
                }
            }
        }
    }
}

/// Writes `first` and whatever else is queued in one flush (an event and its close frame
/// leave in one write). A participant that does not read within the send timeout is dropped,
/// so a stuck socket cannot hold its queue forever.
async fn deliver(
    live: &Live,
    socket: &mut WebSocket,
    first: Outbound,
    inbox: &mut mpsc::UnboundedReceiver<Outbound>,
) -> Option<End> {
    let mut next = Some(first);
    let mut end = None;
    let write = async {
        while let Some(out) = next.take() {
            match out {
                Outbound::Text(text) => {
                    crate::metrics::SOCKET_OUT.increment(1);
                    let text = Utf8Bytes::try_from(text).expect("events are JSON: UTF-8");
                    socket.feed(Message::Text(text)).await?
                }
                Outbound::Close { code, reason } => {
                    let frame = CloseFrame {
                        code,
                        reason: Utf8Bytes::from_static(reason),
                    };
                    socket.feed(Message::Close(Some(frame))).await?;
                    end = Some(End::ByServer);
                    break;
                }
            }
            next = inbox.try_recv().ok();
        }
        socket.flush().await
    };
    let timeout = Duration::from_secs(live.settings.send_timeout_s);
    match tokio::time::timeout(timeout, write).await {
        Ok(Ok(())) => end,
        Ok(Err(_)) | Err(_) => Some(End::Dropped),
    }
}

/// A participant's text frame as the socket reads it: a join, publish, unpublish or leave.
pub fn parse_message(text: &str) -> Result<ClientMessage, LiveError> {
    // Every text frame a participant sends is read here: where it is counted.
    crate::metrics::SOCKET_IN.increment(1);
    let value: Value = serde_json::from_str(text).map_err(|e| LiveError::Parse(e.to_string()))?;
    // Each message is parsed as its own struct, so that a refusal names its field (an
    // internally tagged enum loses the path).
    match value.get("type").and_then(Value::as_str) {
        Some("join") => parse_params(text).map(ClientMessage::Join),
        Some("unpublish") => parse_params(text).map(ClientMessage::Unpublish),
        Some("publish") => Ok(ClientMessage::Publish),
        Some("leave") => Ok(ClientMessage::Leave),
        _ => Err(LiveError::InvalidRequest(
            "`type` must be join, publish, unpublish or leave".into(),
        )),
    }
}

/// Waits for the first message, which must be a join; `None` when the socket went away.
async fn read_join(socket: &mut WebSocket) -> Option<Result<Join, LiveError>> {
    loop {
        return match socket.recv().await? {
            Err(_) | Ok(Message::Close(_)) => None,
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
            Ok(Message::Binary(_)) => Some(Err(LiveError::InvalidRequest(
                "binary frames are not understood".into(),
            ))),
            Ok(Message::Text(text)) => Some(match parse_message(&text) {
                Ok(ClientMessage::Join(join)) => Ok(join),
                Ok(_) => Err(LiveError::InvalidRequest(
                    "the first message must be a join".into(),
                )),
                Err(e) => Err(e),
            }),
        };
    }
}

/// Checks a join: a join token, or the service secret's hash with the challenge nonce.
fn admit(live: &Live, join: Join, nonce: &str) -> Result<Member, LiveError> {
    let Join {
        service_id,
        room_id,
        participant_id,
        value,
        token,
    } = join;
    if let Some(token) = token {
        // The token names all three; a join that also names them must agree with it.
        let grant = live.access.join_grant(&token)?;
        for (field, given, granted) in [
            ("serviceId", &service_id, grant.service_id.as_str()),
            ("roomId", &room_id, grant.room_id.as_str()),
            (
                "participantId",
                &participant_id,
                grant.participant_id.as_str(),
            ),
        ] {
            if given.as_deref().is_some_and(|g| g != granted) {
                return Err(LiveError::InvalidToken(format!(
                    "the token is not for this {field}"
                )));
            }
        }
        return Ok(Member {
            service_id: grant.service_id.into(),
            room_id: grant.room_id,
            participant_id: grant.participant_id,
            publish: grant.publish,
            conn: next_conn_id(),
        });
    }
    let required = |field: &str, v: Option<String>| {
        v.ok_or_else(|| LiveError::invalid_params(field, "required (or a join token)"))
    };
    let (service_id, room_id) = (
        required("serviceId", service_id)?,
        required("roomId", room_id)?,
    );
    let value = required("value", value)?;
    check_id("serviceId", &service_id)?;
    check_id("roomId", &room_id)?;
    if let Some(pid) = &participant_id {
        check_id("participantId", pid)?;
    }
    let service = live
        .access
        .service(&service_id)
        .ok_or(LiveError::Unauthorized { nonce: None })?;
    let expected = sha256_hex(&format!("{}:{nonce}", service.service_hs));
    if !constant_time_eq(&expected, &value) {
        return Err(LiveError::Unauthorized { nonce: None });
    }
    Ok(Member {
        service_id: service_id.into(),
        room_id: room_id.into(),
        participant_id: participant_id.unwrap_or_else(new_uuid).into(),
        publish: true,
        conn: next_conn_id(),
    })
}

async fn refuse(socket: &mut WebSocket, err: &LiveError, reason: &'static str) {
    let _ = send(socket, &err.frame()).await;
    close_with(socket, close::POLICY, reason).await;
}

async fn send(socket: &mut WebSocket, msg: &ServerMessage) -> Result<(), axum::Error> {
    let text = serde_json::to_string(msg).expect("server messages serialise");
    crate::metrics::SOCKET_OUT.increment(1);
    socket.send(Message::Text(Utf8Bytes::from(text))).await
}

async fn close_with(socket: &mut WebSocket, code: u16, reason: &'static str) {
    let frame = CloseFrame {
        code,
        reason: Utf8Bytes::from_static(reason),
    };
    let _ = socket.send(Message::Close(Some(frame))).await;
}
