//! What the adapter tests share: a real server on port 0, a real agent (an HTTP server on
//! port 0) that receives the notifications, and calls as the agent makes them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use kep_adapter::{AdapterService, AdapterSettings};
use kep_api::adapter::{
    AgentNotification, DataModel, LoginModel, NotificationAttempt, OAuth2Login,
    OrgLoginTypeRequest, Synchronization, UploadResult, UserModel,
};
use kep_client::{AdminClient, ClientError};
use kep_core::clock::Clock;
use kep_core::platform::Running;
use kep_testkit::Setup;
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub use kep_testkit::{OPERATOR_TOKEN, eventually};

pub struct Server {
    pub adapter_url: String,
    pub admin: AdminClient,
    /// The service's wall clock: it stands still until a test moves it on.
    pub clock: Clock,
    running: Running,
    dir: tempfile::TempDir,
    /// Its PostgreSQL database, where the tests run on one: a restart finds it again.
    database_url: Option<String>,
}

pub async fn spawn(configure: impl FnOnce(&mut AdapterSettings)) -> Server {
    start_in(Setup::fresh().await, configure).await
}

async fn start_in(setup: Setup, configure: impl FnOnce(&mut AdapterSettings)) -> Server {
    let mut settings = AdapterSettings {
        addr: "127.0.0.1:0".parse().unwrap(),
        notify_backoff_ms: 50,
        ..AdapterSettings::default()
    };
    configure(&mut settings);
    let spawned = kep_testkit::spawn_platform::<AdapterService>(setup, settings).await;
    Server {
        adapter_url: spawned.url("adapter"),
        admin: AdminClient::new(spawned.url("admin"), OPERATOR_TOKEN),
        clock: spawned.clock,
        running: spawned.running,
        dir: spawned.dir,
        database_url: spawned.database_url,
    }
}

impl Server {
    /// The session's notification attempts, once exactly `n` are recorded (the agent may
    /// have a notice a moment before the server records its answer).
    pub async fn attempts(&self, session: &str, n: usize) -> Vec<NotificationAttempt> {
        eventually(
            Duration::from_secs(10),
            &format!("{n} attempts recorded"),
            async || {
                let attempts = self.admin.drm_session(session).await.unwrap().notifications;
                match attempts.len() {
                    len if len == n => Ok(attempts),
                    len => Err(format!("{len} attempts")),
                }
            },
        )
        .await
    }

    /// Stops the platform and starts it again on the same data dir and clock.
    pub async fn restart(self, configure: impl FnOnce(&mut AdapterSettings)) -> Server {
        self.running.stop(Duration::from_secs(5)).await;
        let setup = Setup {
            dir: self.dir,
            clock: self.clock,
            database_url: self.database_url,
        };
        start_in(setup, configure).await
    }
}

/// A test agent: records each notification; answers 500 to the first `failures` of them.
pub struct Agent {
    pub host: String,
    pub notices: mpsc::UnboundedReceiver<(HeaderMap, AgentNotification)>,
}

pub async fn agent(failures: usize) -> Agent {
    let (tx, notices) = mpsc::unbounded_channel();
    let seen = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/drm/notify",
        axum::routing::post(
            move |headers: HeaderMap, axum::Json(n): axum::Json<AgentNotification>| {
                let tx = tx.clone();
                let seen = seen.clone();
                async move {
                    if seen.fetch_add(1, Ordering::SeqCst) < failures {
                        return StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    tx.send((headers, n)).unwrap();
                    StatusCode::NO_CONTENT
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Agent { host, notices }
}

/// An agent's address that answers every request with a redirect (307) to `to`.
pub async fn redirecting_to(to: String) -> String {
    let app = axum::Router::new().fallback(move || {
        let to = to.clone();
        async move { axum::response::Redirect::temporary(&to) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    host
}

pub fn oauth2_org(agent_host: &str) -> OrgLoginTypeRequest {
    OrgLoginTypeRequest {
        method: "OAUTH2".into(),
        adapter_agent: agent_host.into(),
        data_model: Some(DataModel {
            user: Some(UserModel {
                synchronization: Some(Synchronization {
                    options: Some(vec!["name".into(), "email".into()]),
                    active_options: None,
                }),
            }),
            login: Some(LoginModel {
                oauth2: Some(OAuth2Login {
                    authorization_endpoint: "https://idp.example/authorize".into(),
                    token_endpoint: "https://idp.example/token".into(),
                    response_type: "code".into(),
                    client_id: "kep".into(),
                    client_secret: "s3cret".into(),
                    scopes: vec!["openid".into(), "profile".into()],
                }),
                saml2: None,
            }),
        }),
    }
}

pub fn api_status(e: &ClientError) -> (u16, Value) {
    match e {
        ClientError::Api { status, body } => {
            (*status, serde_json::from_str(body).unwrap_or(Value::Null))
        }
        other => panic!("expected an HTTP error, got {other}"),
    }
}

pub async fn next_notice(agent: &mut Agent) -> (HeaderMap, AgentNotification) {
    tokio::time::timeout(Duration::from_secs(10), agent.notices.recv())
        .await
        .expect("a notification")
        .unwrap()
}

pub fn result(result: &str) -> UploadResult {
    UploadResult {
        result: result.into(),
        reason: "policy".into(),
        extra: Some(json!({"client_ip": "10.0.0.1", "agent": "test"})),
    }
}

/// Raw calls to check each header rule.
pub async fn raw(
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Value, HeaderMap) {
    let mut req = reqwest::Client::new().post(url);
    if body.is_none() {
        req = reqwest::Client::new().get(url);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_owned());
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, res.json().await.unwrap_or(Value::Null), headers)
}
