//! What the serving tests share: a real server on port 0 (admin and gateway listeners) and
//! calls to it as a client makes them.
use std::time::Duration;

use kep_core::clock::Clock;
pub use kep_core::service::Service as _;
use kep_serving::{GatewaySettings, ServingService, ServingSettings};
use kep_testkit::Setup;
use reqwest::StatusCode;
use serde_json::{Value, json};

pub use kep_testkit::{OPERATOR_TOKEN, eventually};

pub struct Server {
    pub admin: String,
    pub gateway: String,
    pub http: reqwest::Client,
    pub service: ServingService,
    pub _dir: tempfile::TempDir,
}

pub fn instance_script() -> String {
    format!("{}/tests/instance.py", env!("CARGO_MANIFEST_DIR"))
}

pub async fn spawn(configure: impl FnOnce(&mut ServingSettings, &mut GatewaySettings)) -> Server {
    spawn_on(Clock::system(), configure).await
}

/// A server whose dates are read from `clock`.
pub async fn spawn_on(
    clock: Clock,
    configure: impl FnOnce(&mut ServingSettings, &mut GatewaySettings),
) -> Server {
    let mut settings = ServingSettings {
        restart_backoff_ms: 100,
        restart_backoff_max_s: 1,
        termination_grace_s: 2,
        // The model server is kep's own subcommand, run for real by crates/kep's tests;
        // this test binary must not be started in its place.
        model_server: Some(vec!["false".into()]),
        ..ServingSettings::default()
    };
    let mut gateway_settings = GatewaySettings::default();
    configure(&mut settings, &mut gateway_settings);
    gateway_settings.addr = "127.0.0.1:0".parse().unwrap();
    let setup = Setup {
        clock,
        ..Setup::fresh().await
    };
    let spawned =
        kep_testkit::spawn_platform::<ServingService>(setup, (settings, gateway_settings)).await;
    Server {
        admin: spawned.url("admin"),
        gateway: spawned.url("gateway"),
        http: reqwest::Client::new(),
        service: spawned.service,
        _dir: spawned.dir,
    }
}

impl Server {
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .request(method, format!("{}/admin/v1/serving{path}", self.admin))
            .bearer_auth(OPERATOR_TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.unwrap();
        let status = res.status();
        let text = res.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }

    pub async fn get(&self, path: &str) -> Value {
        let (status, v) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {v}");
        v
    }

    pub async fn delete(&self, path: &str) -> StatusCode {
        self.call(reqwest::Method::DELETE, path, None).await.0
    }

    /// The test server as an image, with the given variables in its command's environment.
    pub async fn image(&self, name: &str) {
        let (s, v) = self
            .post(
                "/images",
                json!({"name": name, "command": ["python3", instance_script()]}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }

    /// Creates an endpoint; returns its API key.
    pub async fn endpoint(&self, name: &str, instances: u32) -> String {
        let (s, v) = self
            .post(
                "/endpoints",
                json!({"name": name, "instance_count": instances}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v["api_key"].as_str().unwrap().to_owned()
    }

    pub async fn deploy(&self, endpoint: &str, body: Value) -> Value {
        let (s, v) = self
            .post(&format!("/endpoints/{endpoint}/deployments"), body)
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v
    }

    /// Polls the deployment until `done` holds, for up to 30 s.
    pub async fn wait_for(
        &self,
        endpoint: &str,
        deployment: &str,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let path = format!("/endpoints/{endpoint}/deployments/{deployment}");
        eventually(
            Duration::from_secs(30),
            &format!("{deployment} {what}"),
            async || {
                let d = self.get(&path).await;
                if done(&d) { Ok(d) } else { Err(d) }
            },
        )
        .await
    }

    pub async fn available(&self, endpoint: &str, deployment: &str) -> Value {
        self.wait_for(endpoint, deployment, "Available", |d| {
            d["state"] == "Available"
        })
        .await
    }

    /// `GET /endpoints/{endpoint}{path}` through the gateway, with `key` where given.
    pub async fn gateway_get(
        &self,
        endpoint: &str,
        key: Option<&str>,
        path: &str,
    ) -> reqwest::Response {
        let mut req = self
            .http
            .get(format!("{}/endpoints/{endpoint}{path}", self.gateway));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send().await.unwrap()
    }

    /// An endpoint call through the gateway: its status and JSON answer.
    pub async fn invoke(
        &self,
        endpoint: &str,
        key: Option<&str>,
        path: &str,
    ) -> (StatusCode, Value) {
        let res = self.gateway_get(endpoint, key, path).await;
        let status = res.status();
        (status, res.json().await.unwrap_or(Value::Null))
    }
}

pub fn custom(name: &str, env: Value) -> Value {
    json!({"name": name, "type": "custom-image", "image": "echo", "env": env,
           "readiness": {"http": {"path": "/ready"}, "interval_s": 0.1, "failure_threshold": 3}})
}

/// Calls made straight to an instance (not through the gateway).
pub async fn instance_calls(http: &reqwest::Client, port: u64) -> u64 {
    let v: Value = http
        .get(format!("http://127.0.0.1:{port}/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["calls"].as_u64().unwrap()
}

/// The test models of `kep-model-server` (made with the `onnx` package), in a folder.
pub fn made_models() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../kep-model-server/tests/make_models.py"
    );
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}
