//! WHIP publish and WHEP subscribe (RFC 9725 and the WHEP draft; CONTRACT §1 "Media"): an
//! SDP offer with a join token as Bearer answers `201`, the SDP answer and `Location`;
//! `PATCH` of the Location trickles candidates, `DELETE` ends the session. Offers are
//! taken as standard clients make them: bundled under `max-bundle`, sections `sendrecv` or
//! one-way (answered the one way kep uses). Refusals are JSON-RPC error answers with an
//! HTTP status of their own (400 offer, 401 token, 403 not allowed, 404 no such stream or
//! session, 405, 413, 415, 422 ICE restart, 429).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kep_core::limits::{Admission, Key, Peer};

use crate::ids::RoomId;
use crate::join_token::JoinGrant;
use crate::media::{Role, SessionUrl};
use crate::{LiveError, LiveService};
use kep_api::live::paths;

/// `POST /api/whip/{room_id}`: publishes the offer's tracks as a new stream of the token's
/// participant.
#[utoipa::path(post, path = paths::WHIP, params(("room_id" = String, Path)),
    request_body(content = String, content_type = "application/sdp", description = "An SDP offer"),
    responses(
        (status = 201, description = "The SDP answer; `Location` is the session, `Kep-Stream-Id` the stream", content_type = "application/sdp", body = String),
        (status = 400, description = "An offer that does not parse, or has no track kep can use", body = kep_api::live::RpcResponse),
        (status = 401, description = "No, a malformed, an expired or another service's join token", body = kep_api::live::RpcResponse),
        (status = 403, description = "A join token of another room, or one that does not allow this", body = kep_api::live::RpcResponse),
        (status = 413, description = "An offer over the body limit", body = kep_api::live::RpcResponse),
        (status = 415, description = "A body that is not application/sdp", body = kep_api::live::RpcResponse),
        (status = 307, description = "The room's media runs on another node of the cluster: the same request there (`Location`)"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn publish(
    State(live): State<LiveService>,
    Path(room_id): Path<RoomId>,
    Peer(peer): Peer,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if let Some(there) = elsewhere(&live, &headers, &room_id).await {
        return redirect(&there, &kep_api::path(paths::WHIP, &[room_id.as_str()]));
    }
    let published = async {
        let (grant, _in_flight, mut negotiated) =
            answer_offer(&live, &headers, peer, &room_id, body, &Role::Publish)?;
        let media = &live.0.media;
        let service: std::sync::Arc<str> = grant.service_id.into();
        let rooms = &live.0.rooms;
        let stream_id = rooms
            .media_started(
                &service,
                &room_id,
                &grant.participant_id,
                Some(negotiated.tracks()),
            )
            .expect("a publisher gets a stream");
        let key = (service, room_id.clone());
        let answer = std::mem::take(&mut negotiated.answer);
        let session = media
            .start(
                &key,
                &grant.participant_id,
                stream_id,
                Role::Publish,
                negotiated,
            )
            .await?;
        let location = kep_api::path(paths::WHIP_SESSION, &[room_id.as_str(), &session]);
        Ok((answer, location, stream_id))
    };
    match published.await {
        Ok((answer, location, stream_id)) => {
            let mut res = created(answer, &location);
            res.headers_mut()
                .insert("kep-stream-id", HeaderValue::from(stream_id));
            res
        }
        Err(e) => LiveError::media_answer(e),
    }
}

/// `POST /api/whep/{room_id}/{stream_id}`: subscribes the token's participant to the stream.
#[utoipa::path(post, path = paths::WHEP, params(("room_id" = String, Path), ("stream_id" = i64, Path)),
    request_body(content = String, content_type = "application/sdp", description = "An SDP offer"),
    responses(
        (status = 201, description = "The SDP answer; `Location` is the session", content_type = "application/sdp", body = String),
        (status = 400, description = "An offer that does not parse, or has no track kep can use", body = kep_api::live::RpcResponse),
        (status = 401, description = "No, a malformed, an expired or another service's join token", body = kep_api::live::RpcResponse),
        (status = 403, description = "A join token of another room, or one that does not allow this", body = kep_api::live::RpcResponse),
        (status = 413, description = "An offer over the body limit", body = kep_api::live::RpcResponse),
        (status = 415, description = "A body that is not application/sdp", body = kep_api::live::RpcResponse),
        (status = 404, description = "No such stream with a publisher in the room", body = kep_api::live::RpcResponse),
        (status = 307, description = "The room's media runs on another node of the cluster: the same request there (`Location`)"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn subscribe(
    State(live): State<LiveService>,
    Path((room_id, stream_id)): Path<(RoomId, String)>,
    Peer(peer): Peer,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if let Some(there) = elsewhere(&live, &headers, &room_id).await {
        return redirect(
            &there,
            &kep_api::path(paths::WHEP, &[room_id.as_str(), &stream_id]),
        );
    }
    let subscribed = async {
        let stream: i64 = stream_id
            .parse()
            .map_err(|_| LiveError::invalid_params("streamId", "an integer"))?;
        let (grant, _in_flight, mut negotiated) =
            answer_offer(&live, &headers, peer, &room_id, body, &Role::Subscribe)?;
        let media = &live.0.media;
        let key: crate::media::RoomKey = (grant.service_id.into(), room_id.clone());
        let answer = std::mem::take(&mut negotiated.answer);
        // Present while it watches; a refused subscribe takes that back.
        let rooms = &live.0.rooms;
        rooms.media_started(&key.0, &room_id, &grant.participant_id, None);
        let session = media
            .start(
                &key,
                &grant.participant_id,
                stream,
                Role::Subscribe,
                negotiated,
            )
            .await
            .inspect_err(|_| rooms.media_ended(&key.0, &room_id, &grant.participant_id, None))?;
        let location = kep_api::path(
            paths::WHEP_SESSION,
            &[room_id.as_str(), &stream_id, &session],
        );
        Ok((answer, location))
    };
    match subscribed.await {
        Ok((answer, location)) => created(answer, &location),
        Err(e) => LiveError::media_answer(e),
    }
}

/// `DELETE /api/whip/{room_id}/{session}`, with the token of the session's participant.
#[utoipa::path(delete, path = paths::WHIP_SESSION, params(("room_id" = String, Path), ("session" = String, Path)),
    responses(
        (status = 200, description = "The session ended"),
        (status = 401, description = "No valid join token", body = kep_api::live::RpcResponse),
        (status = 403, description = "A join token of another room", body = kep_api::live::RpcResponse),
        (status = 404, description = "No such session of the token's participant", body = kep_api::live::RpcResponse),
    ),
    security(("bearer" = [])))]
pub(crate) async fn end_publish(
    State(live): State<LiveService>,
    Path((room_id, session)): Path<(RoomId, String)>,
    Peer(peer): Peer,
    headers: HeaderMap,
) -> Response {
    end(
        &live,
        &room_id,
        Some(SessionUrl::Whip),
        &session,
        peer,
        &headers,
    )
}

/// `DELETE /api/whep/{room_id}/{stream_id}/{session}`, likewise.
#[utoipa::path(delete, path = paths::WHEP_SESSION, params(("room_id" = String, Path), ("stream_id" = i64, Path), ("session" = String, Path)),
    responses(
        (status = 200, description = "The session ended"),
        (status = 401, description = "No valid join token", body = kep_api::live::RpcResponse),
        (status = 403, description = "A join token of another room", body = kep_api::live::RpcResponse),
        (status = 404, description = "No such session of the token's participant", body = kep_api::live::RpcResponse),
    ),
    security(("bearer" = [])))]
pub(crate) async fn end_subscribe(
    State(live): State<LiveService>,
    Path((room_id, stream_id, session)): Path<(RoomId, String, String)>,
    Peer(peer): Peer,
    headers: HeaderMap,
) -> Response {
    end(
        &live,
        &room_id,
        whep_url(&stream_id),
        &session,
        peer,
        &headers,
    )
}

/// The URL of a WHEP session of `stream_id`; none when that is not a stream id, so no
/// session lives there.
fn whep_url(stream_id: &str) -> Option<SessionUrl> {
    stream_id.parse().ok().map(SessionUrl::Whep)
}

fn end(
    live: &LiveService,
    room_id: &RoomId,
    url: Option<SessionUrl>,
    session: &str,
    peer: std::net::IpAddr,
    headers: &HeaderMap,
) -> Response {
    let ended = || {
        let (grant, _in_flight) = admit(live, headers, peer, room_id)?;
        let key = (grant.service_id.into(), room_id.clone());
        let media = &live.0.media;
        let ended =
            url.is_some_and(|url| media.end_session(&key, &grant.participant_id, url, session));
        if !ended {
            return Err(LiveError::SessionNotFound);
        }
        Ok(())
    };
    match ended() {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => LiveError::media_answer(e),
    }
}

/// `PATCH /api/whip/{room_id}/{session}`: ICE candidates the publisher trickled.
#[utoipa::path(patch, path = paths::WHIP_SESSION, params(("room_id" = String, Path), ("session" = String, Path)),
    request_body(content = String, content_type = "application/trickle-ice-sdpfrag", description = "An SDP fragment (RFC 8840) with `a=candidate` lines"),
    responses(
        (status = 204, description = "The candidates were handed to the session"),
        (status = 400, description = "A candidate line that does not parse", body = kep_api::live::RpcResponse),
        (status = 401, description = "No valid join token", body = kep_api::live::RpcResponse),
        (status = 403, description = "A join token of another room", body = kep_api::live::RpcResponse),
        (status = 404, description = "No such session of the token's participant", body = kep_api::live::RpcResponse),
        (status = 415, description = "A body that is not application/trickle-ice-sdpfrag", body = kep_api::live::RpcResponse),
        (status = 422, description = "An ICE restart (`If-Match: *`), which kep does not support", body = kep_api::live::RpcResponse),
    ),
    security(("bearer" = [])))]
pub(crate) async fn trickle_publish(
    State(live): State<LiveService>,
    Path((room_id, session)): Path<(RoomId, String)>,
    Peer(peer): Peer,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let url = Some(SessionUrl::Whip);
    trickle(&live, &room_id, url, &session, peer, &headers, body)
}

/// `PATCH /api/whep/{room_id}/{stream_id}/{session}`, likewise.
#[utoipa::path(patch, path = paths::WHEP_SESSION, params(("room_id" = String, Path), ("stream_id" = i64, Path), ("session" = String, Path)),
    request_body(content = String, content_type = "application/trickle-ice-sdpfrag", description = "An SDP fragment (RFC 8840) with `a=candidate` lines"),
    responses(
        (status = 204, description = "The candidates were handed to the session"),
        (status = 400, description = "A candidate line that does not parse", body = kep_api::live::RpcResponse),
        (status = 401, description = "No valid join token", body = kep_api::live::RpcResponse),
        (status = 403, description = "A join token of another room", body = kep_api::live::RpcResponse),
        (status = 404, description = "No such session of the token's participant", body = kep_api::live::RpcResponse),
        (status = 415, description = "A body that is not application/trickle-ice-sdpfrag", body = kep_api::live::RpcResponse),
        (status = 422, description = "An ICE restart (`If-Match: *`), which kep does not support", body = kep_api::live::RpcResponse),
    ),
    security(("bearer" = [])))]
pub(crate) async fn trickle_subscribe(
    State(live): State<LiveService>,
    Path((room_id, stream_id, session)): Path<(RoomId, String, String)>,
    Peer(peer): Peer,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let url = whep_url(&stream_id);
    trickle(&live, &room_id, url, &session, peer, &headers, body)
}

/// Trickle ICE (RFC 9725 §4.3.1): the fragment's candidates go to the session. kep's answer
/// already has its only candidate and ICE-lite learns the peer's address from its checks,
/// so they are a hint; an ICE restart is refused (422), as the RFC asks of a server that
/// takes only trickles.
fn trickle(
    live: &LiveService,
    room_id: &RoomId,
    url: Option<SessionUrl>,
    session: &str,
    peer: std::net::IpAddr,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let trickled = || {
        let (grant, _in_flight) = admit(live, headers, peer, room_id)?;
        let key = (grant.service_id.into(), room_id.clone());
        let frag = text_body(
            headers,
            body,
            "application/trickle-ice-sdpfrag",
            live.0.settings.body_limit_bytes,
        )?;
        if headers.get(header::IF_MATCH).is_some_and(|v| v == "*") {
            return Err(LiveError::IceRestartNotSupported);
        }
        let candidates = frag
            .lines()
            .filter_map(|line| line.trim_end().strip_prefix("a="))
            .filter(|a| a.starts_with("candidate:"))
            .map(|c| {
                str0m::Candidate::from_sdp_string(c).map_err(|e| {
                    LiveError::InvalidOffer(format!("a candidate that does not parse: {e}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let media = &live.0.media;
        let handed = url.is_some_and(|url| {
            media.trickle(&key, &grant.participant_id, url, session, candidates)
        });
        if !handed {
            return Err(LiveError::SessionNotFound);
        }
        Ok(())
    };
    match trickled() {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => LiveError::media_answer(e),
    }
}

/// A session takes `PATCH` and `DELETE` only.
pub(crate) async fn other_method() -> Response {
    let mut res = LiveError::MethodNotAllowed.media_answer();
    res.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("PATCH, DELETE"));
    res
}

/// What a WHIP and a WHEP POST share: the join token's grant for the room (with its
/// admission, held until answered), the right the role needs, and the offer answered.
fn answer_offer(
    live: &LiveService,
    headers: &HeaderMap,
    peer: std::net::IpAddr,
    room_id: &RoomId,
    body: Result<Bytes, BytesRejection>,
    role: &Role,
) -> Result<(JoinGrant, Admission, crate::media::Negotiated), LiveError> {
    let (grant, admission) = admit(live, headers, peer, room_id)?;
    let (allowed, what) = match role {
        Role::Publish => (grant.publish, "publishing"),
        Role::Subscribe => (grant.subscribe, "subscribing"),
    };
    if !allowed {
        return Err(LiveError::Forbidden(format!(
            "the join token does not allow {what}"
        )));
    }
    let offer = text_body(
        headers,
        body,
        "application/sdp",
        live.0.settings.body_limit_bytes,
    )?;
    let negotiated = live.0.media.negotiate(&offer, role)?;
    Ok((grant, admission, negotiated))
}

/// The join token's grant, for this room, within its service's limits (a call without a
/// valid token counts against its peer).
fn admit(
    live: &LiveService,
    headers: &HeaderMap,
    peer: std::net::IpAddr,
    room_id: &RoomId,
) -> Result<(JoinGrant, Admission), LiveError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| kep_core::http::credentials(v, "Bearer"));
    let grant = match token {
        Some(token) => live.0.access.join_grant(token),
        None => Err(LiveError::InvalidToken(
            "Authorization: Bearer <join token> is required".into(),
        )),
    };
    let key = match &grant {
        Ok(g) => Key::Client(g.service_id.as_str().into()),
        Err(_) => Key::peer(peer),
    };
    let admission = live.0.limiter.admit(key)?;
    let grant = grant?;
    if grant.room_id != *room_id {
        return Err(LiveError::Forbidden(
            "the join token is for another room".into(),
        ));
    }
    Ok((grant, admission))
}

/// A text body of `content_type` (an offer, a trickle) within the body limit.
fn text_body(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    content_type: &'static str,
    limit: usize,
) -> Result<String, LiveError> {
    if !kep_core::http::content_type_is(headers, content_type) {
        return Err(LiveError::UnsupportedMediaType(content_type));
    }
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => LiveError::PayloadTooLarge { limit },
        _ => LiveError::InvalidOffer(e.body_text()),
    })?;
    String::from_utf8(body.to_vec()).map_err(|_| LiveError::InvalidOffer("not UTF-8".into()))
}

/// The live URL of the node where the room's media runs, when that is another node (CONTRACT
/// §5): asked only for a valid join token of the room, so the room's whereabouts are told
/// to nobody else; anything else is this node's to answer.
async fn elsewhere(live: &LiveService, headers: &HeaderMap, room_id: &RoomId) -> Option<String> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| kep_core::http::credentials(v, "Bearer"))?;
    let grant = live.0.access.join_grant(token).ok()?;
    if grant.room_id != *room_id {
        return None;
    }
    let key: crate::media::RoomKey = (grant.service_id.into(), room_id.clone());
    if live.0.media.has_room(&key) || live.0.cluster.node_id().is_none() {
        return None;
    }
    let ask = serde_json::json!({ "service": &*key.0, "room": key.1 }).to_string();
    let replies = live
        .0
        .cluster
        .gather(crate::media::WHERE, &ask)
        .await
        .ok()?;
    replies.into_iter().find_map(|(_, r)| r.ok())
}

/// `307` to the same request on the node `there` (RFC 9725 allows the redirect).
fn redirect(there: &str, path: &str) -> Response {
    let mut res = StatusCode::TEMPORARY_REDIRECT.into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("{}{path}", there.trim_end_matches('/'))) {
        res.headers_mut().insert(header::LOCATION, location);
    }
    res
}

fn created(answer: String, location: &str) -> Response {
    let mut res = (StatusCode::CREATED, answer).into_response();
    let headers = res.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/sdp"),
    );
    if let Ok(location) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, location);
    }
    res
}
