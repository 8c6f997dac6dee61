//! What the messaging tests share: a real server on port 0 and calls to it as a client makes
//! them.

use std::time::Duration;

use kep_core::clock::Clock;
use kep_messaging::{MessagingService, MessagingSettings};
use kep_testkit::Setup;
use reqwest::StatusCode;
use serde_json::{Value, json};

pub use kep_testkit::{OPERATOR_TOKEN, eventually};

pub struct Server {
    pub url: String,
    pub admin: String,
    pub http: reqwest::Client,
    /// The service's wall clock: it stands still until a test moves it on.
    pub clock: Clock,
    _dir: tempfile::TempDir,
}

pub async fn spawn() -> Server {
    spawn_with(|_| {}).await
}

pub async fn spawn_with(configure: impl FnOnce(&mut MessagingSettings)) -> Server {
    spawn_on(Setup::fresh().await, configure).await
}

/// A node where `setup` says (on PostgreSQL: one of several, when others share its
/// database; on SQLite: a database of its own).
pub async fn spawn_on(setup: Setup, configure: impl FnOnce(&mut MessagingSettings)) -> Server {
    let mut settings = MessagingSettings {
        addr: "127.0.0.1:0".parse().unwrap(),
        simulator_delay_ms: 20,
        ..MessagingSettings::default()
    };
    configure(&mut settings);
    let spawned = kep_testkit::spawn_platform::<MessagingService>(setup, settings).await;
    Server {
        url: spawned.url("messaging"),
        admin: spawned.url("admin"),
        http: reqwest::Client::new(),
        clock: spawned.clock,
        _dir: spawned.dir,
    }
}

impl Server {
    pub async fn client(&self) -> (String, String) {
        let res = self
            .http
            .post(format!("{}/admin/v1/messaging/clients", self.admin))
            .bearer_auth(OPERATOR_TOKEN)
            .json(&json!({"name": "test"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        let v: Value = res.json().await.unwrap();
        (
            v["client_id"].as_str().unwrap().to_owned(),
            v["client_secret"].as_str().unwrap().to_owned(),
        )
    }

    pub async fn token(&self, id: &str, secret: &str) -> String {
        let res = self
            .http
            .post(format!("{}/v2/oauth/token", self.url))
            .basic_auth(id, Some(secret))
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        res.json::<Value>().await.unwrap()["access_token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub async fn post(&self, token: &str, path: &str, body: &Value) -> (StatusCode, Value) {
        let res = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(token)
            .header("accept", "*/*")
            .json(body)
            .send()
            .await
            .unwrap();
        (res.status(), res.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, token: &str, path: &str) -> (StatusCode, Value) {
        let res = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        (res.status(), res.json().await.unwrap_or(Value::Null))
    }

    /// An operator route's answer, as JSON.
    pub async fn operator_get(&self, path: &str) -> Value {
        let res = self
            .http
            .get(format!("{}{path}", self.admin))
            .bearer_auth(OPERATOR_TOKEN)
            .send()
            .await
            .unwrap();
        res.json().await.unwrap()
    }

    /// What was handed to the carrier, newest first.
    pub async fn outbox(&self) -> Value {
        self.operator_get("/admin/v1/messaging/outbox").await
    }

    /// The XMS detail once the message left status 100.
    pub async fn settled(&self, token: &str, uid: &str) -> Value {
        let path = format!("/v2/info/message/search/detail/{uid}");
        self.settle(token, &path, "status_code").await
    }

    /// The RCS detail once the message left status 100.
    pub async fn rcs_settled(&self, token: &str, uid: &str) -> Value {
        let path = format!("/v2/info/rcs/search/detail/{uid}");
        self.settle(token, &path, "status").await
    }

    async fn settle(&self, token: &str, path: &str, status: &str) -> Value {
        eventually(
            Duration::from_secs(30),
            &format!("{path} settles"),
            async || {
                let (_, v) = self.get(token, path).await;
                if v["result"][status] == "API_100" {
                    Err(v)
                } else {
                    Ok(v["result"].clone())
                }
            },
        )
        .await
    }
}

pub fn sms(cid: &str, phone: &str) -> Value {
    json!({"cid": cid, "message_type": "SM", "phone_number": phone, "message": "안녕하세요", "sender_no": "0212345678"})
}

pub fn rcs(cid: &str, phone: &str) -> Value {
    json!({
        "cid": cid, "message_type": "RCSLMS", "phone_number": phone, "template_code": "OO000000", "agency_id": "agency",
        "ad_flag": "N", "sender_no": "0212345678", "fall_back_yn": false,
        "body": [{"title": "제목", "description": "본문", "button": [{"action": "open"}]}]
    })
}
