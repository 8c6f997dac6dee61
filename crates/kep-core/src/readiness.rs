//! The platform's readiness (CONTRACT §0 "Running kep anywhere"): what it still waits for
//! before it serves as it should, answered at `/readyz`, and `/healthz`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use kep_api::readiness::{Health, Readiness};

/// What the platform waits for; cloned handles share it.
#[derive(Clone, Default)]
pub struct Ready(Arc<Mutex<Waiting>>);

#[derive(Default)]
struct Waiting {
    on: BTreeSet<String>,
    failed: Option<String>,
}

impl Ready {
    /// Not ready until [`Ready::done`] with the same name.
    pub fn wait_for(&self, what: &str) {
        self.lock().on.insert(what.to_owned());
    }

    pub fn done(&self, what: &str) {
        self.lock().on.remove(what);
    }

    /// Never ready, for `reason` (the init file failed).
    pub fn failed(&self, reason: String) {
        self.lock().failed = Some(reason);
    }

    /// The answer of `/readyz` now.
    pub fn now(&self) -> Readiness {
        let w = self.lock();
        let ready = w.on.is_empty() && w.failed.is_none();
        Readiness {
            status: if ready { "ready" } else { "starting" }.to_owned(),
            waiting: w.on.iter().cloned().collect(),
            reason: w.failed.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.0.lock().expect("readiness lock")
    }
}

/// Whether the platform serves as it should: 200 once it waits for nothing, else 503 with
/// what it waits for (and why it never will, when the init file failed).
#[utoipa::path(get, path = kep_api::readiness::READYZ,
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Starting, or the init file failed", body = Readiness)),
    tag = "platform")]
pub async fn readyz(State(ready): State<Ready>) -> (StatusCode, Json<Readiness>) {
    let now = ready.now();
    let status = if now.status == "ready" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(now))
}

/// 200 while the process lives.
#[utoipa::path(get, path = kep_api::readiness::HEALTHZ,
    responses((status = 200, description = "The process lives", body = Health)),
    tag = "platform")]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(healthz, readyz), components(schemas(Readiness, Health)))]
struct ReadinessDoc;

/// `/healthz` and `/readyz`'s part of the operator document: no token, and the admin
/// listener's limits' 429, as every call of it may answer.
pub fn doc() -> utoipa::openapi::OpenApi {
    let mut doc = <ReadinessDoc as utoipa::OpenApi>::openapi();
    utoipa::Modify::modify(&crate::http::LimitAnswers(Some("ErrorBody")), &mut doc);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_it_waits_for_nothing_and_never_after_a_failure() {
        let ready = Ready::default();
        assert_eq!(ready.now().status, "ready");
        ready.wait_for("live");
        ready.wait_for("init");
        let now = ready.now();
        assert_eq!(
            (now.status.as_str(), now.waiting),
            ("starting", vec!["init".to_owned(), "live".to_owned()])
        );
        ready.done("live");
        ready.done("init");
        assert_eq!(ready.now().status, "ready");
        ready.failed("init: kep.toml: bad".into());
        let now = ready.now();
        assert_eq!(
            (now.status.as_str(), now.reason.as_deref()),
            ("starting", Some("init: kep.toml: bad"))
        );
    }
}
