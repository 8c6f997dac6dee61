//! Whether the platform is up (`GET /healthz`) and ready to serve (`GET /readyz`), on the
//! admin listener, without a token: what a container's health check or an orchestrator's
//! probe asks.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The path of the liveness answer.
pub const HEALTHZ: &str = "/healthz";
/// The path of the readiness answer.
pub const READYZ: &str = "/readyz";

/// The answer of `/readyz`: 200 `{"status": "ready"}` once every started service has its
/// store migrated and its listener bound, and the init file is applied; else 503
/// `{"status": "starting", "waiting": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Readiness {
    /// `ready` or `starting`.
    pub status: String,
    /// What is not ready yet: services by name (`live`, `adapter`, `messaging`, `serving`),
    /// and `init` while the init file is being applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<String>,
    /// Why it will not turn ready: the init file failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The answer of `/healthz`: `{"status": "ok"}` while the process lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}
