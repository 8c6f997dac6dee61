//! The live API: operator calls, Provision and the Room methods, and a participant.

use futures_util::{SinkExt as _, StreamExt as _};
use kep_api::live::{
    ClientMessage, CreateServiceRequest, DestroyRoomResult, InactivateRequest, Join, JoinClaims,
    KickRequest, ListParticipantsResult, ParticipantTarget, ProvisionAuth, ProvisionParams,
    ProvisionResult, RoomList, RoomParams, RpcRequest, RpcResponse, Scheme, ServerMessage,
    ServiceList, ServiceSecrets, ServiceSummary, StreamTarget, TargetsParams, UpdateServiceRequest,
    VersionParams, Webhook, WebhookDeliveries, WebhookRequest, provision_value,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::{AdminClient, ClientError, path};
use kep_api::live::paths;

impl AdminClient {
    /// `POST /admin/v1/live/services`
    pub async fn create_live_service(
        &self,
        req: &CreateServiceRequest,
    ) -> Result<ServiceSecrets, ClientError> {
        self.send(self.http.post(self.url(paths::SERVICES)).json(req))
            .await
    }

    /// `GET /admin/v1/live/services`
    pub async fn list_live_services(&self) -> Result<ServiceList, ClientError> {
        self.send(self.http.get(self.url(paths::SERVICES))).await
    }

    /// `GET /admin/v1/live/services/{id}`
    pub async fn live_service(&self, id: &str) -> Result<ServiceSummary, ClientError> {
        self.send(self.http.get(self.url(&path(paths::SERVICE, &[id]))))
            .await
    }

    /// `PATCH /admin/v1/live/services/{id}`
    pub async fn set_live_verifier(
        &self,
        id: &str,
        url: Option<String>,
    ) -> Result<ServiceSummary, ClientError> {
        let req = UpdateServiceRequest {
            external_verifier_url: url,
        };
        self.send(
            self.http
                .patch(self.url(&path(paths::SERVICE, &[id])))
                .json(&req),
        )
        .await
    }

    /// `POST /admin/v1/live/services/{id}/secrets`
    pub async fn rotate_live_secrets(&self, id: &str) -> Result<ServiceSecrets, ClientError> {
        self.send(
            self.http
                .post(self.url(&path(paths::SERVICE_SECRETS, &[id]))),
        )
        .await
    }

    /// Sets where the service's room events go; the answer shows the signing secret.
    pub async fn set_live_webhook(
        &self,
        service: &str,
        url: &str,
        enabled: bool,
    ) -> Result<Webhook, ClientError> {
        let req = WebhookRequest {
            url: url.to_owned(),
            enabled,
        };
        let url = self.url(&path(paths::WEBHOOK, &[service]));
        self.send(self.http.put(url).json(&req)).await
    }

    pub async fn live_webhook(&self, service: &str) -> Result<Webhook, ClientError> {
        self.send(self.http.get(self.url(&path(paths::WEBHOOK, &[service]))))
            .await
    }

    pub async fn rotate_live_webhook_secret(&self, service: &str) -> Result<Webhook, ClientError> {
        self.send(
            self.http
                .post(self.url(&path(paths::WEBHOOK_SECRET, &[service]))),
        )
        .await
    }

    /// The service's webhook events, newest first, with how their delivery went.
    pub async fn live_webhook_deliveries(
        &self,
        service: &str,
        limit: Option<i64>,
    ) -> Result<WebhookDeliveries, ClientError> {
        let mut req = self
            .http
            .get(self.url(&path(paths::WEBHOOK_DELIVERIES, &[service])));
        if let Some(limit) = limit {
            req = req.query(&[("limit", limit)]);
        }
        self.send(req).await
    }

    /// `GET /admin/v1/live/services/{id}/rooms`
    pub async fn live_rooms(&self, service: &str) -> Result<RoomList, ClientError> {
        self.send(self.http.get(self.url(&path(paths::ROOMS, &[service]))))
            .await
    }

    /// `DELETE /admin/v1/live/services/{id}/rooms/{room}`
    pub async fn destroy_live_room(&self, service: &str, room: &str) -> Result<(), ClientError> {
        self.send_empty(
            self.http
                .delete(self.url(&path(paths::ROOM, &[service, room]))),
        )
        .await
    }

    /// `POST /admin/v1/live/services/{id}/rooms/{room}/kick`
    pub async fn kick_live_participants(
        &self,
        service: &str,
        room: &str,
        participant_ids: &[String],
    ) -> Result<(), ClientError> {
        let req = KickRequest {
            targets: participant_ids
                .iter()
                .map(|p| ParticipantTarget {
                    participant_id: p.clone(),
                })
                .collect(),
        };
        self.send_empty(
            self.http
                .post(self.url(&path(paths::ROOM_KICK, &[service, room])))
                .json(&req),
        )
        .await
    }

    /// `POST /admin/v1/live/services/{id}/rooms/{room}/inactivate` with (participantId,
    /// streamId) targets.
    pub async fn inactivate_live_streams(
        &self,
        service: &str,
        room: &str,
        targets: &[(String, i64)],
    ) -> Result<(), ClientError> {
        let req = InactivateRequest {
            targets: targets
                .iter()
                .map(|(p, s)| StreamTarget {
                    participant_id: p.clone(),
                    stream_id: *s,
                })
                .collect(),
        };
        self.send_empty(
            self.http
                .post(self.url(&path(paths::ROOM_INACTIVATE, &[service, room])))
                .json(&req),
        )
        .await
    }
}

/// `POST /api/rpc` on the live listener.
#[derive(Clone)]
pub struct LiveClient {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
}

impl LiveClient {
    /// `base` is the live listener (or a provision result's `api`).
    pub fn new(base: &str) -> Self {
        LiveClient {
            http: crate::tls::http(),
            url: format!("{}{}", base.trim_end_matches('/'), paths::RPC),
            token: None,
        }
    }

    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// One JSON-RPC call; the `id` is the one the seed fixes for the method.
    pub async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        id: u64,
        method: &'static str,
        params: P,
    ) -> Result<R, ClientError> {
        let body = RpcRequest {
            jsonrpc: "2.0",
            id: id.to_string().into(),
            method,
            params,
        };
        let mut req = self.http.post(&self.url).json(&body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let res = req.send().await?;
        let status = res.status();
        let text = res.text().await?;
        let answer: RpcResponse = serde_json::from_str(&text).map_err(|_| ClientError::Api {
            status: status.as_u16(),
            body: text.clone(),
        })?;
        match (answer.result, answer.error) {
            (_, Some(err)) => Err(ClientError::Rpc(err)),
            (Some(result), None) => {
                serde_json::from_value(result).map_err(|e| ClientError::Protocol(e.to_string()))
            }
            (None, None) => Err(ClientError::Protocol(
                "an answer with neither result nor error".into(),
            )),
        }
    }

    /// Provision step 1: the nonce the server hands out with its intentional -11002.
    pub async fn provision_nonce(
        &self,
        service_id: &str,
        scheme: Scheme,
    ) -> Result<String, ClientError> {
        let params = ProvisionParams {
            version: None,
            service_id: service_id.into(),
            scheme,
            auth: None,
        };
        match self
            .call::<_, serde_json::Value>(1, "Provision", params)
            .await
        {
            Err(ClientError::Rpc(e)) => e
                .data
                .as_ref()
                .and_then(|d| d["nonce"].as_str())
                .map(str::to_owned)
                .ok_or(ClientError::Rpc(e)),
            Err(e) => Err(e),
            Ok(_) => Err(ClientError::Protocol(
                "step 1 of Provision succeeded".into(),
            )),
        }
    }

    /// Provision step 2 with a nonce and a value computed by the caller.
    pub async fn provision_with(
        &self,
        service_id: &str,
        scheme: Scheme,
        nonce: &str,
        value: &str,
    ) -> Result<ProvisionResult, ClientError> {
        let auth = ProvisionAuth {
            nonce: nonce.into(),
            key: service_id.into(),
            value: value.into(),
        };
        let params = ProvisionParams {
            version: None,
            service_id: service_id.into(),
            scheme,
            auth: Some(auth),
        };
        self.call(2, "Provision", params).await
    }

    /// Both steps of Provision with the admin secret (`scheme: internal`).
    pub async fn provision(
        &self,
        service_id: &str,
        admin_secret: &str,
    ) -> Result<ProvisionResult, ClientError> {
        let nonce = self.provision_nonce(service_id, Scheme::Internal).await?;
        let value = provision_value(service_id, admin_secret, &nonce);
        self.provision_with(service_id, Scheme::Internal, &nonce, &value)
            .await
    }

    /// `Room.ListRooms`
    pub async fn list_rooms(&self) -> Result<Vec<String>, ClientError> {
        self.call(1, "Room.ListRooms", VersionParams::default())
            .await
    }

    /// `Room.ListParticipants`
    pub async fn list_participants(
        &self,
        room_id: &str,
    ) -> Result<ListParticipantsResult, ClientError> {
        self.call(
            1,
            "Room.ListParticipants",
            RoomParams {
                version: None,
                room_id: room_id.into(),
            },
        )
        .await
    }

    /// `Room.DestroyRoom`
    pub async fn destroy_room(&self, room_id: &str) -> Result<DestroyRoomResult, ClientError> {
        self.call(
            1,
            "Room.DestroyRoom",
            RoomParams {
                version: None,
                room_id: room_id.into(),
            },
        )
        .await
    }

    /// `Room.KickParticipant`
    pub async fn kick(&self, room_id: &str, participant_ids: &[String]) -> Result<(), ClientError> {
        let targets = participant_ids
            .iter()
            .map(|p| ParticipantTarget {
                participant_id: p.clone(),
            })
            .collect();
        let params = TargetsParams {
            version: None,
            room_id: room_id.into(),
            targets,
        };
        self.call::<_, serde_json::Value>(1, "Room.KickParticipant", params)
            .await
            .map(drop)
    }

    /// `Room.InactiveStream`
    pub async fn inactivate(
        &self,
        room_id: &str,
        targets: &[(String, i64)],
    ) -> Result<(), ClientError> {
        let targets = targets
            .iter()
            .map(|(p, s)| StreamTarget {
                participant_id: p.clone(),
                stream_id: *s,
            })
            .collect();
        let params = TargetsParams {
            version: None,
            room_id: room_id.into(),
            targets,
        };
        self.call::<_, serde_json::Value>(1, "Room.InactiveStream", params)
            .await
            .map(drop)
    }
}

/// A participant on `GET /api/ws`.
pub struct Participant {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub participant_id: String,
    /// The `joined` message.
    pub joined: ServerMessage,
}

/// A join token for `claims`, signed HS256 with the service's key
/// ([`kep_api::live::join_token_key`]): what a customer's server hands its participants.
pub fn join_token(service_id: &str, service_secret: &str, claims: &JoinClaims) -> String {
    let key = kep_api::live::join_token_key(service_id, service_secret);
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(key.as_bytes()),
    )
    .expect("HS256 signs any claims")
}

/// A closed socket: the close frame's code and reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Closed {
    pub code: u16,
    pub reason: String,
}

impl Participant {
    /// Opens the socket at `base` (the live listener, `http://…`), answers the challenge
    /// with the service secret and joins `room_id`.
    pub async fn join(
        base: &str,
        service_id: &str,
        service_secret: &str,
        room_id: &str,
        participant_id: Option<&str>,
    ) -> Result<Self, ClientError> {
        Self::join_as(base, |nonce| {
            ClientMessage::Join(Join {
                service_id: Some(service_id.into()),
                room_id: Some(room_id.into()),
                participant_id: participant_id.map(str::to_owned),
                value: Some(kep_api::live::join_value(service_id, service_secret, nonce)),
                token: None,
            })
        })
        .await
    }

    /// Joins with a join token ([`join_token`]), which names the room and participant.
    pub async fn join_with_token(base: &str, token: &str) -> Result<Self, ClientError> {
        Self::join_as(base, |_| {
            ClientMessage::Join(Join {
                token: Some(token.into()),
                ..Join::default()
            })
        })
        .await
    }

    /// Opens the socket and sends the join `join` makes of the challenge's nonce.
    async fn join_as(
        base: &str,
        join: impl FnOnce(&str) -> ClientMessage,
    ) -> Result<Self, ClientError> {
        let url = format!(
            "{}/api/ws",
            base.trim_end_matches('/').replacen("http", "ws", 1)
        );
        // The messages are small: 4 KiB buffers instead of 128 KiB let one process hold
        // thousands of participants.
        let config = WebSocketConfig::default()
            .read_buffer_size(4 * 1024)
            .write_buffer_size(0);
        let (mut socket, _) = tokio_tungstenite::connect_async_tls_with_config(
            url,
            Some(config),
            true,
            crate::tls::ws_connector()?,
        )
        .await?;
        let nonce = match next_message(&mut socket).await? {
            Ok(ServerMessage::Challenge { nonce }) => nonce,
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected a challenge, got {other:?}"
                )));
            }
        };
        socket
            .send(Message::text(
                serde_json::to_string(&join(&nonce)).expect("serialises"),
            ))
            .await?;
        match next_message(&mut socket).await? {
            Ok(joined @ ServerMessage::Joined { .. }) => {
                let ServerMessage::Joined { participant_id, .. } = &joined else {
                    unreachable!()
                };
                Ok(Participant {
                    participant_id: participant_id.clone(),
                    socket,
                    joined,
                })
            }
            Ok(ServerMessage::Error {
                code,
                message,
                data,
            }) => Err(ClientError::Rpc(kep_api::live::RpcError {
                code,
                message,
                data,
            })),
            other => Err(ClientError::Protocol(format!(
                "expected joined, got {other:?}"
            ))),
        }
    }

    pub async fn send(&mut self, msg: &ClientMessage) -> Result<(), ClientError> {
        self.socket
            .send(Message::text(
                serde_json::to_string(msg).expect("serialises"),
            ))
            .await?;
        Ok(())
    }

    /// The next message, or how the socket closed.
    pub async fn next(&mut self) -> Result<Result<ServerMessage, Closed>, ClientError> {
        next_message(&mut self.socket).await
    }

    /// Publishes a stream and waits for its id (events that arrive first are skipped).
    pub async fn publish(&mut self) -> Result<i64, ClientError> {
        self.send(&ClientMessage::Publish).await?;
        loop {
            match self.next().await? {
                Ok(ServerMessage::Published { stream_id }) => return Ok(stream_id),
                Ok(ServerMessage::Event(_)) => continue,
                other => {
                    return Err(ClientError::Protocol(format!(
                        "expected published, got {other:?}"
                    )));
                }
            }
        }
    }
}

async fn next_message(
    socket: &mut WebSocketStream<MaybeTlsStream<TcpStream>>,
) -> Result<Result<ServerMessage, Closed>, ClientError> {
    loop {
        let Some(msg) = socket.next().await else {
            return Ok(Err(Closed {
                code: 1006,
                reason: String::new(),
            }));
        };
        match msg? {
            Message::Text(t) => {
                return serde_json::from_str(&t)
                    .map(Ok)
                    .map_err(|e| ClientError::Protocol(format!("{e}: {t}")));
            }
            Message::Close(frame) => {
                let (code, reason) = frame
                    .map(|f| (u16::from(f.code), f.reason.to_string()))
                    .unwrap_or((1005, String::new()));
                return Ok(Err(Closed { code, reason }));
            }
            _ => continue,
        }
    }
}
