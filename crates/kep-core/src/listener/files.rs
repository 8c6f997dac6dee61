//! The listener's files in the data dir: the address book and the operator token.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context as _;

/// Writes `<data-dir>/addresses.json`, `{"admin": "127.0.0.1:8800", …}`, and `urls.json`,
/// `{"admin": "https://127.0.0.1:8800", …}` (each listener as a client on this host reaches
/// it, scheme included: what the CLI reads).
pub fn write_addresses(
    data_dir: &Path,
    addrs: &BTreeMap<&str, SocketAddr>,
    urls: &BTreeMap<&str, String>,
) -> anyhow::Result<()> {
    write_json(data_dir, "urls.json", &serde_json::to_vec_pretty(urls)?)?;
    write_json(
        data_dir,
        "addresses.json",
        &serde_json::to_vec_pretty(addrs)?,
    )
}

fn write_json(data_dir: &Path, name: &str, json: &[u8]) -> anyhow::Result<()> {
    let path = data_dir.join(name);
    let tmp = data_dir.join(format!("{name}.tmp"));
    crate::private::write(&tmp, json)?;
    // A rename, so a reader polling for the file never sees half of it.
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}

/// The operator token: the configured one, else the one in `<data-dir>/admin-token`, else a
/// new one written there with mode 0600. The flag says whether it was just generated (and
/// so must be printed once).
pub fn operator_token(data_dir: &Path, configured: Option<&str>) -> anyhow::Result<(String, bool)> {
    if let Some(t) = configured.filter(|t| !t.is_empty()) {
        return Ok((t.to_owned(), false));
    }
    let path = data_dir.join("admin-token");
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let existing = existing.trim();
        if !existing.is_empty() {
            return Ok((existing.to_owned(), false));
        }
    }
    let token = crate::secret::new_secret();
    crate::private::dir(data_dir)?;
    crate::private::write(&path, token.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok((token, true))
}
