//! A real live service on port 0 (live and admin listeners), driven over HTTP and WebSocket.

use std::time::Duration;

use kep_api::live::{CreateServiceRequest, EventKind, ServerMessage, ServiceSecrets};
use kep_client::live::{Closed, LiveClient, Participant};
use kep_client::{AdminClient, ClientError};
use kep_core::clock::Clock;
use kep_live::{LiveService, LiveSettings};
use kep_testkit::Setup;
use tokio_util::sync::CancellationToken;

pub use kep_testkit::{OPERATOR_TOKEN, eventually};

pub struct TestServer {
    pub live_url: String,
    pub admin: AdminClient,
    pub service: LiveService,
    pub shutdown: CancellationToken,
    /// The service's wall clock: it stands still until a test moves it on.
    pub clock: Clock,
    _dir: tempfile::TempDir,
}

pub async fn spawn(configure: impl FnOnce(&mut LiveSettings)) -> TestServer {
    let mut settings = LiveSettings {
        addr: "127.0.0.1:0".parse().unwrap(),
        media_addr: "127.0.0.1:0".parse().unwrap(),
        ..LiveSettings::default()
    };
    configure(&mut settings);
    let spawned = kep_testkit::spawn_platform::<LiveService>(Setup::fresh().await, settings).await;
    TestServer {
        live_url: spawned.url("live"),
        admin: AdminClient::new(spawned.url("admin"), OPERATOR_TOKEN),
        service: spawned.service,
        shutdown: spawned.shutdown,
        clock: spawned.clock,
        _dir: spawned.dir,
    }
}

impl TestServer {
    pub async fn create_service(&self, id: &str) -> ServiceSecrets {
        self.admin
            .create_live_service(&CreateServiceRequest {
                service_id: Some(id.into()),
                external_verifier_url: None,
                ..Default::default()
            })
            .await
            .unwrap()
    }

    /// A Room API client for a fresh service with a provisioned token.
    pub async fn room_client(&self, id: &str) -> (ServiceSecrets, LiveClient) {
        let secrets = self.create_service(id).await;
        let provisioned = LiveClient::new(&self.live_url)
            .provision(id, &secrets.admin_secret)
            .await
            .unwrap();
        (
            secrets,
            LiveClient::new(&provisioned.api).with_token(provisioned.token),
        )
    }

    /// Every kind of room change, in rooms lobby and hall: alice and bob join lobby, alice
    /// publishes a stream (its id is returned) that is inactivated, bob is kicked; carol
    /// joins hall, which is destroyed; alice leaves, which closes lobby.
    pub async fn room_story(&self, s: &ServiceSecrets, rooms: &LiveClient) -> i64 {
        let mut alice = self.join(s, "lobby", "alice").await;
        let bob = self.join(s, "lobby", "bob").await;
        let stream = alice.publish().await.unwrap();
        rooms
            .inactivate("lobby", &[("alice".into(), stream)])
            .await
            .unwrap();
        rooms.kick("lobby", &["bob".to_owned()]).await.unwrap();
        drop(bob);
        let _carol = self.join(s, "hall", "carol").await;
        rooms.destroy_room("hall").await.unwrap();
        drop(alice);
        stream
    }

    pub async fn join(&self, s: &ServiceSecrets, room: &str, pid: &str) -> Participant {
        Participant::join(
            &self.live_url,
            &s.service_id,
            &s.service_secret,
            room,
            Some(pid),
        )
        .await
        .unwrap()
    }

    /// A raw JSON-RPC call: (HTTP status, body).
    pub async fn raw_rpc(
        &self,
        content_type: &str,
        token: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> (u16, serde_json::Value) {
        let mut req = reqwest::Client::new()
            .post(format!("{}/api/rpc", self.live_url))
            .header("content-type", content_type)
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap())
    }
}

/// The next message, within 30 s (on a loaded machine, well past any grace the tests set).
pub async fn next(p: &mut Participant) -> Result<ServerMessage, Closed> {
    tokio::time::timeout(Duration::from_secs(30), p.next())
        .await
        .expect("a message within 30 s")
        .unwrap()
}

/// The next event, which must be `kind`; returns (participantId, streamId).
pub async fn expect_event(p: &mut Participant, kind: EventKind) -> (Option<String>, Option<i64>) {
    match next(p).await {
        Ok(ServerMessage::Event(e)) if e.event == kind => (e.participant_id, e.stream_id),
        other => panic!("expected {kind:?}, got {other:?}"),
    }
}

/// Nothing arrives within a short while (a window waited through on purpose).
pub async fn expect_quiet(p: &mut Participant) {
    if let Ok(msg) = tokio::time::timeout(Duration::from_millis(200), p.next()).await {
        panic!("expected nothing, got {msg:?}");
    }
}

/// The code of a JSON-RPC error.
pub fn rpc_code(e: &ClientError) -> i64 {
    match e {
        ClientError::Rpc(e) => e.code,
        other => panic!("expected a JSON-RPC error, got {other}"),
    }
}

/// The data of a JSON-RPC error.
pub fn rpc_data(e: &ClientError) -> serde_json::Value {
    match e {
        ClientError::Rpc(e) => e.data.clone().unwrap_or_default(),
        other => panic!("expected a JSON-RPC error, got {other}"),
    }
}
