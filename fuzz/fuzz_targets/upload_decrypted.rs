//! `POST /api/trust/drm/v0/uploadDecrypted` through the adapter's real router: the input's
//! first line is the Content-Type (its boundary), the rest the multipart body, read by
//! axum's `Multipart` and streamed by `Drm::release` as the server does. The call names a
//! granted DRM session, so the body is read; one that releases the file uses the session
//! up, and the next input gets a new one.
#![no_main]

use std::sync::{LazyLock, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use kep_adapter::{AdapterService, AdapterSettings};
use kep_core::service::Service as _;
use kep_fuzz::{call, context, runtime, setup_call, upload_request};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

const FILE_ID: &str = "contract.pdf";

struct Adapter {
    router: Router,
    admin: Router,
    org_id: i64,
    /// `Authorization: Secret <key>`, `Kep-OrgLoginType: ID <id>`.
    credentials: [(&'static str, String); 2],
    /// A session granted and not yet released.
    session: Mutex<String>,
}

impl Adapter {
    /// A new DRM session for the file, granted by a `SUCCESS` result.
    fn grant(&self) -> String {
        let created = setup_call(
            &self.admin,
            Method::POST,
            "/admin/v1/adapter/drm-requests",
            &[],
            &json!({"org_login_type_id": self.org_id, "file_id": FILE_ID, "file_type": "DRM"}),
            StatusCode::CREATED,
        );
        let session = created["session_id"].as_str().expect("a session id");
        let dsid = format!("DSID {session}");
        let mut headers = self.headers(&dsid);
        headers.push(("kep-file-type", "DRM"));
        setup_call(
            &self.router,
            Method::POST,
            "/api/trust/drm/v0/uploadResult",
            &headers,
            &json!({"result": "SUCCESS", "reason": "released for review"}),
            StatusCode::OK,
        );
        session.to_owned()
    }

    /// The headers of an agent's call on the session `dsid` (`DSID <session>`).
    fn headers<'a>(&'a self, dsid: &'a str) -> Vec<(&'a str, &'a str)> {
        let mut headers: Vec<_> = self
            .credentials
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        headers.extend([("kep-agentsession", dsid), ("kep-file-id", FILE_ID)]);
        headers
    }
}

static ADAPTER: LazyLock<Adapter> = LazyLock::new(|| {
    let settings = AdapterSettings {
        // The agent is a closed port: one quick notification attempt per session.
        notify_attempts: 1,
        notify_timeout_s: 1,
        // Sessions outlive any run.
        session_ttl_s: 7 * 24 * 3600,
        ..AdapterSettings::default()
    };
    let service = runtime()
        .block_on(AdapterService::start(
            settings,
            &context("http://127.0.0.1:8802"),
        ))
        .expect("the adapter starts");
    let admin = service.admin_router();
    let org = setup_call(
        &admin,
        Method::POST,
        "/admin/v1/adapter/org-login-types",
        &[],
        &json!({"method": "OAUTH2", "adapter_agent": "127.0.0.1:9"}),
        StatusCode::CREATED,
    );
    let org_id = org["id"].as_i64().expect("an org id");
    let key = org["secret_key"].as_str().expect("a secret key");
    let mut adapter = Adapter {
        router: service.app().router,
        admin,
        org_id,
        credentials: [
            ("authorization", format!("Secret {key}")),
            ("kep-orglogintype", format!("ID {org_id}")),
        ],
        session: Mutex::default(),
    };
    let session = adapter.grant();
    *adapter.session.get_mut().expect("not poisoned") = session;
    adapter
});

fuzz_target!(|data: &[u8]| {
    let adapter = &*ADAPTER;
    let mut session = adapter.session.lock().expect("not poisoned");
    let dsid = format!("DSID {session}");
    let headers = adapter.headers(&dsid);
    let Some(request) = upload_request("/api/trust/drm/v0/uploadDecrypted", &headers, data) else {
        return;
    };
    let answer = call(&adapter.router, request);
    let json = answer.json();
    // Released, or a bad body; never a conflict (the session is granted) nor a 5xx.
    assert!(
        matches!(answer.status.as_u16(), 200 | 400 | 413),
        "{} {json}",
        answer.status
    );
    assert_eq!(json["_code"], answer.status.as_u16(), "{json}");
    if answer.status == StatusCode::OK {
        *session = adapter.grant();
    }
});
