//! Declared resources (CONTRACT §0 "Running kep anywhere"): what a file (`kep apply -f`,
//! `kep serve --init`) declares, applied through the operator API's `POST /admin/v1/apply`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The path of an apply.
pub const APPLY: &str = "/admin/v1/apply";

/// `POST /admin/v1/apply`: a declaration, as its TOML file reads, by section (`live`,
/// `adapter`, `messaging`); planned whole first, then applied, or refused with nothing done.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApplyRequest {
    /// `{"live": {"services": [...]}, "adapter": {"org_login_types": [...]}, "messaging":
    /// {"clients": [...]}}`.
    #[schema(value_type = Object)]
    #[serde(deserialize_with = "object")]
    pub declaration: serde_json::Map<String, serde_json::Value>,
    /// Also deletes what the declaration does not name, of the kinds it names.
    #[serde(default)]
    pub prune: bool,
}

/// A JSON object, and nothing else (`null` is no declaration).
fn object<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<serde_json::Map<String, serde_json::Value>, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Object(map) => Ok(map),
        other => Err(serde::de::Error::custom(format!(
            "an object of sections (live, adapter, messaging), not {other}"
        ))),
    }
}

/// What an apply did, object by object: section by section (live, adapter, messaging), each
/// in the declaration's order, its deletions last.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApplyAnswer {
    pub objects: Vec<Applied>,
}

/// One object of an apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Applied {
    /// Its kind, as the file names it: `live.services`, `adapter.org_login_types`,
    /// `messaging.clients`.
    pub kind: String,
    pub id: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Created,
    Changed,
    Unchanged,
    Deleted,
}

impl std::fmt::Display for Applied {
    /// `apply`'s line: `<kind> <id>: created | changed | unchanged | deleted`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let outcome = match self.outcome {
            Outcome::Created => "created",
            Outcome::Changed => "changed",
            Outcome::Unchanged => "unchanged",
            Outcome::Deleted => "deleted",
        };
        write!(f, "{} {}: {outcome}", self.kind, self.id)
    }
}
