//! The adapter's typed ids.

use std::fmt;

kep_core::string_id!(
    SessionId,
    "A DRM release session's id (`DSID` of `Kep-AgentSession`)."
);

/// An org login type's id (`ID` of `Kep-OrgLoginType`): a number on the wire.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, sqlx::Type,
)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct OrgLoginTypeId(#[serde(deserialize_with = "kep_api::whole::integer")] pub i64);

impl fmt::Display for OrgLoginTypeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
