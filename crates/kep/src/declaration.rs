//! Declared-resource files (CONTRACT §0 "Running kep anywhere"): TOML read into the
//! declaration `POST /admin/v1/apply` takes, for `kep apply -f` and `kep serve --init`; and
//! the declaration of `kep serve --dev`.

use std::path::Path;

use anyhow::Context as _;
use serde_json::{Map, Value};

/// What `kep serve --dev` declares, with the contract's fixed credentials; the org login
/// type's agent is `kep adapter agent`'s default address.
pub const DEV: &str = r#"
[[live.services]]
serviceId = "dev"
adminSecret = "dev-admin-secret"
serviceSecret = "dev-service-secret"

[[adapter.org_login_types]]
id = 1
method = "OAUTH2"
adapter_agent = "127.0.0.1:9000"
secret_key = "dev-agent-secret"

[[messaging.clients]]
client_id = "dev"
client_secret = "dev-client-secret"
"#;

/// The declaration in `file`; unreadable or not TOML is an error naming it.
pub fn read(file: &Path) -> anyhow::Result<Map<String, Value>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    parse(&text).with_context(|| file.display().to_string())
}

pub fn parse(text: &str) -> anyhow::Result<Map<String, Value>> {
    Ok(toml::from_str(text)?)
}

/// The line `apply` prints for each object.
pub fn lines(objects: &[kep_api::declared::Applied]) -> String {
    objects.iter().map(|o| format!("{o}\n")).collect()
}
